"""jepa-convert on broken copies of tiny checkpoints (issue 21, L8): every malformed config.json,
preprocessor_config.json, modules.json, index and weights file is one line, `jepa-convert: error:
<file>: <key and what is wrong>`, exit 1, never a traceback or a hang. Before, 71 of its 72 cases
failed: about half were a TypeError, KeyError, AttributeError or SafetensorError traceback, a FIFO
weights file hung, and the rest named no file (`invalid literal for int() with base 10: 'abc'`).

One table: (base checkpoint, the edit, the file the message must name, what it must say)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jepa.convert.cli import main

from conftest import LEWM_BUNDLE, build_hf_model, export_timm_layout, random_meta_pt

pytestmark = pytest.mark.transformers

DELETE = object()
Edit = Callable[[Path], None]


def edit(name: str, **changes: Any) -> Edit:
    """Set (or, with DELETE, remove) keys of the JSON file `name`; a key a.b is section a's b."""
    def apply(d: Path) -> None:
        path = d / name
        doc = json.loads(path.read_text())
        for key, value in changes.items():
            *sections, leaf = key.split("__")
            target = doc
            for s in sections:
                target = target[s]
            if value is DELETE:
                target.pop(leaf, None)
            else:
                target[leaf] = value
        path.write_text(json.dumps(doc))
    return apply


def put(name: str, content: Any) -> Edit:
    """Write `name`: bytes as given, anything else as JSON."""
    def apply(d: Path) -> None:
        path = d / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return apply


def cut(name: str, keep: int) -> Edit:
    """Truncate `name` to `keep` bytes (negative: drop that many from the end)."""
    def apply(d: Path) -> None:
        path = d / name
        data = path.read_bytes()
        path.write_bytes(data[: keep if keep >= 0 else len(data) + keep])
    return apply


def fifo(name: str) -> Edit:
    def apply(d: Path) -> None:
        (d / name).unlink()
        os.mkfifo(d / name)
    return apply


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny checkpoints of each layout: an HF ViT, a timm-layout safetensors, a sentence-transformers
    BERT, an HF V-JEPA 2, a Meta V-JEPA 2 .pt and the LeWM reference bundle."""
    import torch
    from transformers import BertConfig, BertModel, VJEPA2Config, VJEPA2Model

    from jepa.testing.random_text import tiny_tokenizer_json, tiny_vocab_size, write_st_layout

    root = tmp_path_factory.mktemp("bases")
    build_hf_model(root / "vit", "vit", num_hidden_layers=1)
    (root / "timm").mkdir()
    export_timm_layout(root / "vit", root / "timm" / "model.safetensors")
    (root / "timm" / "config.json").write_text('{"num_heads": 4}')
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tiny_vocab_size(), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=66)
    BertModel(cfg, add_pooling_layer=False).eval().save_pretrained(root / "bert")
    (root / "bert" / "tokenizer.json").write_text(tiny_tokenizer_json())
    write_st_layout(root / "bert", 32, {"pooling_mode_mean_tokens": True}, normalize=True, max_seq_length=64)
    VJEPA2Model(VJEPA2Config(hidden_size=64, num_attention_heads=2, num_hidden_layers=1, crop_size=32,
                             frames_per_clip=4, pred_hidden_size=64, pred_num_attention_heads=2,
                             pred_num_hidden_layers=1)).eval().save_pretrained(root / "vjepa2")
    (root / "meta").mkdir()
    random_meta_pt(root / "meta" / "model.pt", 64)
    (root / "meta" / "config.json").write_text('{"num_heads": 4, "img_size": 32, "num_frames": 4}')
    (root / "lewm").mkdir()
    for name in ("config.json", "weights.pt"):
        shutil.copy(LEWM_BUNDLE / name, root / "lewm" / name)
    return root


CFG, PRE, ST = "config.json", "preprocessor_config.json", "model.safetensors"
# (base, how it is given to --src, its edit, the file the error names, what the error says)
CASES: list[tuple[str, str, Edit, str, str]] = [
    # config.json of an HF ViT
    ("vit", "", edit(CFG, hidden_size=None), CFG, "hidden_size must be an integer, got null"),
    ("vit", "", edit(CFG, hidden_size="abc"), CFG, 'hidden_size must be an integer, got "abc"'),
    ("vit", "", edit(CFG, hidden_size=DELETE), CFG, "hidden_size is missing"),
    ("vit", "", edit(CFG, num_hidden_layers=1.5), CFG,
     "num_hidden_layers must be an integer, got 1.5"),
    ("vit", "", edit(CFG, num_hidden_layers=True), CFG,
     "num_hidden_layers must be an integer, got true"),
    ("vit", "", edit(CFG, num_hidden_layers=-1), CFG,
     "num_hidden_layers must be at least 1, got -1"),
    ("vit", "", edit(CFG, patch_size=[16]), CFG, "unsupported patch_size=[16] (only square"),
    ("vit", "", edit(CFG, patch_size={"a": 1}), CFG,
     'patch_size must be an integer, got {"a": 1}'),
    ("vit", "", edit(CFG, layer_norm_eps="x"), CFG, 'layer_norm_eps must be a number, got "x"'),
    ("vit", "", edit(CFG, hidden_act=[1]), CFG, "unsupported hidden_act=[1] (known: gelu"),
    ("vit", "", edit(CFG, qkv_bias="yes"), CFG, 'qkv_bias must be true or false, got "yes"'),
    ("vit", "", put(CFG, [1, 2]), CFG, "not a JSON object (it holds [1, 2])"),
    ("vit", "", put(CFG, b"{oops"), CFG, "not valid JSON (Expecting property name"),
    ("vit", "", put(CFG, b'{"a": "\xff"}'), CFG, "not UTF-8 text (byte 0xff at offset 7)"),
    # preprocessor_config.json
    ("vit", "", put(PRE, [1]), PRE, "not a JSON object"),
    ("vit", "", put(PRE, {"size": "x"}), PRE,
     'size must be an integer, got "x"'),
    ("vit", "", put(PRE, {"size": {"height": None}}), PRE,
     "size.height must be an integer, got null"),
    ("vit", "", put(PRE, {"size": {"height": 32}}), PRE,
     "size.width is missing"),
    ("vit", "", put(PRE, {"image_mean": "abc"}), PRE,
     'image_mean must be a number, got "abc"'),
    ("vit", "", put(PRE, {"image_std": [1, "a", 2]}), PRE,
     'image_std[1] must be a number, got "a"'),
    ("vit", "", put(PRE, {"resample": [2]}), PRE,
     "unsupported resample=[2]"),
    ("vit", "", put(PRE, {"rescale_factor": "x"}), PRE,
     'rescale_factor must be a number, got "x"'),
    ("vit", "", put(PRE, {"do_resize": "no"}), PRE,
     'do_resize must be true or false, got "no"'),
    ("vit", "", put(PRE, {"size": {"shortest_edge": "x"}, "do_center_crop": True}),
     PRE, 'size.shortest_edge must be an integer, got "x"'),
    # the weights
    ("vit", "", cut(ST, -1000), ST,
     "not a readable safetensors file (Error while deserializing header: incomplete metadata"),
    ("vit", "", cut(ST, 100), ST, "not a readable safetensors file"),
    ("vit", "", cut(ST, 0), ST, "not a readable safetensors file"),
    ("vit", "", put(ST, b"\xff" * 64), ST, "not a readable safetensors file"),
    ("vit", "", fifo(ST), ST, "not a regular file"),
    ("vit", "", put("model.safetensors.index.json", [1]), "model.safetensors.index.json",
     "weight_map must be an object of tensor name -> shard file"),
    ("vit", "", put("model.safetensors.index.json", {"weight_map": {"a": 5}}), "model.safetensors.index.json",
     'weight_map["a"] must be the name of a shard file in its folder, got 5'),
    ("vit", "", put("model.safetensors.index.json", {"weight_map": {"a": "../x.safetensors"}}),
     "model.safetensors.index.json", "must be the name of a shard file in its folder"),
    ("vit", "", put("model.safetensors.index.json", {"weight_map": {"a": "nope.safetensors"}}),
     "nope.safetensors", "No such file or directory"),
    # a timm-layout file and its config.json
    ("timm", ST, edit(CFG, num_heads="x"), CFG,
     'num_heads must be an integer, got "x"'),
    ("timm", ST, put(CFG, {"model_args": [1]}), CFG,
     "model_args must be an object, got [1]"),
    ("timm", ST, put(CFG, [1]), CFG, "not a JSON object"),
    ("timm", ST, cut(ST, -100), ST,
     "not a readable safetensors file"),
    # a sentence-transformers BERT
    ("bert", "", put("modules.json", {"a": 1}), "modules.json", "not a JSON list of modules"),
    ("bert", "", put("modules.json", ["x"]), "modules.json",
     'module [0] must be an object with a type, got "x"'),
    ("bert", "", put("modules.json", [{"path": ""}]), "modules.json", "[0].type is missing"),
    ("bert", "", put("modules.json", [{"type": 5}]), "modules.json", "[0].type must be a string, got 5"),
    ("bert", "", put("modules.json", [{"type": "sentence_transformers.models.Transformer", "path": 5}]),
     "modules.json", "[0].path must be a string, got 5"),
    ("bert", "", put("modules.json", [{"type": "sentence_transformers.models.Transformer", "path": "../.."}]),
     "modules.json", "[0].path must be a folder inside the directory, got '../..'"),
    ("bert", "", put("modules.json", b"[oops"), "modules.json", "not valid JSON"),
    ("bert", "", put("1_Pooling/config.json", [1]), "1_Pooling/config.json", "not a JSON object"),
    ("bert", "", put("1_Pooling/config.json", {"pooling_mode_mean_tokens": "yes"}), "1_Pooling/config.json",
     'pooling_mode_mean_tokens must be true or false, got "yes"'),
    ("bert", "", put("sentence_bert_config.json", {"max_seq_length": "x"}), "sentence_bert_config.json",
     'max_seq_length must be an integer, got "x"'),
    ("bert", "", put("sentence_bert_config.json", [1]), "sentence_bert_config.json", "not a JSON object"),
    ("bert", "", put("tokenizer_config.json", [1]), "tokenizer_config.json", "not a JSON object"),
    ("bert", "", put("tokenizer.json", [1]), "tokenizer.json", "not a tokenizer.json (no model)"),
    ("bert", "", put("tokenizer.json", b"\xff"), "tokenizer.json", "not UTF-8 text (byte 0xff at offset 0)"),
    ("bert", "", put("tokenizer.json", b"{oops"), "tokenizer.json", "not valid JSON"),
    ("bert", "", edit(CFG, hidden_size=None), CFG, "hidden_size must be an integer, got null"),
    ("bert", "", edit(CFG, num_hidden_layers=DELETE), CFG, "num_hidden_layers is missing"),
    ("bert", "", edit(CFG, position_embedding_type=[1]), CFG,
     "unsupported position_embedding_type=[1] (known: absolute)"),
    ("bert", "", edit(CFG, is_decoder="no"), CFG, 'is_decoder must be true or false'),
    ("bert", "", put(CFG, [1]), CFG, "not a JSON object"),
    ("bert", "", cut(ST, -100), ST, "not a readable safetensors file"),
    # an HF V-JEPA 2
    ("vjepa2", "", edit(CFG, pred_hidden_size=None), CFG,
     "pred_hidden_size must be an integer, got null"),
    ("vjepa2", "", edit(CFG, num_hidden_layers=DELETE), CFG, "num_hidden_layers is missing"),
    ("vjepa2", "", edit(CFG, crop_size="x"), CFG, 'crop_size must be an integer, got "x"'),
    ("vjepa2", "", edit(CFG, hidden_act=[1]), CFG, "unsupported hidden_act=[1] (known: gelu)"),
    # a Meta V-JEPA 2 .pt and its config.json
    ("meta", "model.pt", cut("model.pt", -1000), "model.pt", "not a readable PyTorch checkpoint"),
    ("meta", "model.pt", put("model.pt", b"not a checkpoint"), "model.pt",
     "not a readable PyTorch checkpoint"),
    ("meta", "model.pt", edit(CFG, num_heads="x"), CFG, 'num_heads must be an integer, got "x"'),
    ("meta", "model.pt", put(CFG, [1]), CFG, "not a JSON object"),
    # LeWM's Hydra config
    ("lewm", "", edit(CFG, encoder=[1]), CFG, "no 'encoder' section"),
    ("lewm", "", edit(CFG, encoder__hidden_size="x"), CFG,
     'encoder.hidden_size must be an integer, got "x"'),
    ("lewm", "", edit(CFG, encoder__size=3), CFG, "unsupported encoder.size=3 (known: tiny"),
    ("lewm", "", edit(CFG, predictor__heads="x"), CFG,
     'predictor.heads must be an integer, got "x"'),
    ("lewm", "", edit(CFG, predictor__depth=None, predictor__mlp_dim="x"), CFG,
     'predictor.mlp_dim must be an integer, got "x"'),
    ("lewm", "", cut("weights.pt", -1000), "weights.pt", "not a readable PyTorch checkpoint"),
]


@pytest.mark.parametrize(("base", "given", "change", "file", "says"), CASES,
                         ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(CASES)])
def test_a_malformed_checkpoint_is_one_line_naming_the_file_and_the_key(
    bases: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    base: str, given: str, change: Edit, file: str, says: str,
) -> None:
    d = tmp_path / base
    shutil.copytree(bases / base, d)
    change(d)
    out = tmp_path / "out.gguf"
    family = ["--family", "lewm"] if base == "lewm" else []
    rc = main(["--src", str(d / given) if given else str(d), "--out", str(out), *family])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line]
    assert rc == 1 and len(lines) == 1, err
    assert lines[0].startswith(f"jepa-convert: error: {d / file}: "), err
    assert says in lines[0], err
    assert not out.exists()


def test_every_base_converts_as_it_is(
    bases: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table's edits are what breaks each case: the untouched copies convert."""
    for base, given in (("vit", ""), ("timm", "model.safetensors"), ("bert", ""), ("vjepa2", ""),
                        ("meta", "model.pt"), ("lewm", "")):
        family = ["--family", "lewm"] if base == "lewm" else []
        src = bases / base / given if given else bases / base
        assert main(["--src", str(src), "--out", str(tmp_path / f"{base}.gguf"), *family]) == 0, \
            capsys.readouterr().err
