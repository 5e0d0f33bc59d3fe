"""Every shell and Python block of README.md and docs/*.md runs, as written, in a sandbox where the
files it names exist (tests/docs_blocks.py: what runs and how, the directives, the rules).

The sandbox is built once per session from the project's own tiny random-weight writers (the names
the docs use are links to them) and photos from scikit-image; what needs torch or transformers to
build (a Hugging Face directory to convert, a Meta .pt) is built on first use, and the block that
needs it carries the marker. A block gets a sandbox of its own: links to the session's files, which
are read-only, so a block that wrote into one would fail here rather than change the next block's
inputs."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest
from docs_blocks import (
    ROOT,
    Block,
    DirectiveError,
    Directives,
    all_blocks,
    commands,
    extract,
    parse_directives,
    pip_problems,
    previous,
    python_source,
    shell_script,
)

from conftest import AC_BUNDLE, LEWM_BUNDLE, REFERENCE_DIR, TINY_VJEPA2, TINY_VJEPA2_PARTS, random_meta_pt

BIN = Path(sys.executable).parent
BLOCKS = all_blocks()
MAX_SKIPPED = 5  # blocks that need what CI has not (4 today); raise it only with a reason in the doc
BLOCK_TIMEOUT_S = 240

# ---- the sandbox ---------------------------------------------------------------------------------

# The tiny LeWM of the docs' examples: ViT 64 wide at 56 px (patch 14), a 2-layer predictor; PushT's
# 10-wide actions.
TINY_LEWM: dict[str, Any] = dict(enc_dim=64, enc_layers=2, enc_heads=2, img_size=56, embed_dim=64, n_layer=2,
                                 n_head=2, head_dim=32, ffn_dim=128, proj_hidden=128)
# Names the docs use for each model file of the sandbox.
MODEL_NAMES = {
    "demo": ["vit.gguf", "demo.gguf", "demo-vit.gguf"],
    "vjepa2": ["vjepa2-vitl.gguf", "ssv2.gguf", "ssv2-vitl.gguf"],
    "text": ["minilm.gguf"],
    "ac": ["ac.gguf", "vjepa2-ac-vitg.gguf"],
    "lewm": ["lewm.gguf", "lewm-pusht.gguf"],
}


def write_video(path: Path, n: int = 16, size: tuple[int, int] = (64, 48)) -> None:
    import av

    with av.open(str(path), mode="w") as c:
        s = c.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(n):
            x = np.linspace(0, 255, size[0], dtype=np.float32)[None, :, None] + 12 * i
            pixels = np.broadcast_to(x % 256, (size[1], size[0], 3)).astype(np.uint8)
            c.mux(s.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
        c.mux(s.encode())


def build_media(d: Path) -> None:
    from PIL import Image
    from skimage import data

    astronaut, coffee, chelsea = (Image.fromarray(f()) for f in (data.astronaut, data.coffee, data.chelsea))
    (d / "photos" / "cats").mkdir(parents=True)
    astronaut.save(d / "photos" / "astronaut.jpg", quality=90)
    coffee.save(d / "photos" / "coffee.webp")
    chelsea.save(d / "photos" / "cats" / "chelsea.png")
    # Over 96 KiB, so its base64 is over the 128 KiB one argument of a command line may have.
    chelsea.resize((chelsea.width * 3, chelsea.height * 3)).save(d / "cat.jpg", quality=95)
    assert (d / "cat.jpg").stat().st_size > 96 * 1024
    small = {"dog.png": coffee, "a.jpg": astronaut, "b.png": coffee, "now.png": chelsea, "goal.png": coffee,
             "f0.png": astronaut, "f1.png": coffee, "f2.png": chelsea}
    for name, im in small.items():
        im.resize((96, 64)).save(d / name)
    (d / "frames").mkdir()
    for i in range(6):
        astronaut.rotate(15 * i).resize((64, 64)).save(d / "frames" / f"frame{i}.png")
    (d / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    for name in ("clip.mp4", "a.mp4", "b.mp4", "walk.mp4"):
        write_video(d / name)
    (d / "captions.txt").write_text("a photo of a cat\na dog on a beach\ntwo cups of coffee\n")
    (d / "queries.jsonl").write_text('"query: a cat"\n{"text": "query: fast vector search"}\n')


def build_models(d: Path) -> None:
    from jepa.demo import write_demo_model
    from jepa.testing.random_text import write_random_bert
    from jepa.testing.random_vjepa2 import write_random_vjepa2
    from jepa.testing.random_world import write_random_ac, write_random_lewm

    first = {
        "demo": write_demo_model(d / "_demo.gguf"),  # `jepa-convert --demo`'s model: 224 px, 192 wide
        "vjepa2": write_random_vjepa2(d / "_vjepa2.gguf", **TINY_VJEPA2, **TINY_VJEPA2_PARTS),
        "text": write_random_bert(d / "_text.gguf"),
        "ac": write_random_ac(d / "_ac.gguf"),
        "lewm": write_random_lewm(d / "_lewm.gguf", **TINY_LEWM),
    }
    for kind, names in MODEL_NAMES.items():
        for name in names:
            os.link(first[kind], d / name)
        Path(first[kind]).unlink()
    (d / "srv" / "models").mkdir(parents=True)
    for name in ("vit.gguf", "minilm.gguf"):
        os.link(d / name, d / "srv" / "models" / name)


def read_only(d: Path) -> None:
    for p in d.rglob("*"):
        if p.is_file() and not p.is_symlink():
            p.chmod(0o444)


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("docs-sandbox")
    build_models(d)
    build_media(d)
    read_only(d)
    return d


# ---- stand-ins that need torch or transformers to build, on first use ---------------------------


def hf_vit_dir(out: Path) -> None:
    from conftest import build_hf_model

    build_hf_model(out, "vit")


def timm_file(out: Path) -> None:
    """LeJEPA's layout at ViT-S width (384: 6 heads, what the converter infers with no config)."""
    from conftest import build_hf_model, export_timm_layout

    src, _ = build_hf_model(out.parent / "_hf-for-timm", "vit", hidden_size=384, num_attention_heads=6,
                            intermediate_size=64, num_hidden_layers=1)
    export_timm_layout(src, out)
    shutil.rmtree(src)


def bert_dir(out: Path, st: bool = False) -> None:
    """A tiny transformers BertModel directory with the tiny tokenizer; st: a sentence-transformers one."""
    import torch
    from transformers import BertConfig, BertModel

    from jepa.testing.random_text import tiny_tokenizer_json, tiny_vocab_size, write_st_layout

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tiny_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=66)
    BertModel(cfg, add_pooling_layer=False).eval().save_pretrained(out)
    (out / "tokenizer.json").write_text(tiny_tokenizer_json())
    if st:
        write_st_layout(out, 32, {"pooling_mode_mean_tokens": True}, normalize=True, max_seq_length=64)


VJEPA2_HF: dict[str, Any] = dict(hidden_size=64, num_attention_heads=2, num_hidden_layers=2, crop_size=32,
                                 frames_per_clip=4, pred_hidden_size=64, pred_num_attention_heads=2,
                                 pred_num_hidden_layers=2, num_pooler_layers=1, num_labels=6)


def vjepa2_hf_dir(out: Path, classifier: bool = False) -> None:
    import torch
    from transformers import VJEPA2Config, VJEPA2ForVideoClassification, VJEPA2Model

    torch.manual_seed(0)
    cls = VJEPA2ForVideoClassification if classifier else VJEPA2Model
    cls(VJEPA2Config(**VJEPA2_HF)).eval().save_pretrained(out)


def link_to(target: Path) -> Callable[[Path], None]:
    def make(out: Path) -> None:
        out.symlink_to(target)

    return make


@dataclass(frozen=True)
class StandIn:
    name: str  # its path in the sandbox
    marker: str  # pytest marker of a block that needs it: what building it imports ("" for nothing)
    build: Callable[[Path], None]

    def used_by(self, block: Block) -> bool:
        return re.search(rf"(?<![\w.-]){re.escape(self.name)}(?![\w.-])", block.code) is not None


STAND_INS = [
    StandIn("path/to/hf-vit-dir", "transformers", hf_vit_dir),
    StandIn("lejepa-vits16.safetensors", "transformers", timm_file),
    StandIn("path/to/all-MiniLM-L6-v2", "transformers", lambda out: bert_dir(out, st=True)),
    StandIn("path/to/bert-dir", "transformers", bert_dir),
    StandIn("vjepa2-vitl-fpc64-256", "transformers", vjepa2_hf_dir),
    StandIn("vjepa2-vitl-fpc16-256-ssv2", "transformers", lambda out: vjepa2_hf_dir(out, classifier=True)),
    StandIn("vitl.pt", "torch", lambda out: random_meta_pt(out, 768)),
    StandIn("tiny.pt", "torch", lambda out: random_meta_pt(out, 64, depth=2)),
    # V-JEPA 2.1 at ViT-B's width and depth (12 heads from the width), with a narrow MLP.
    StandIn("vjepa2_1_vitb_384.pt", "torch", lambda out: random_meta_pt(out, 768, depth=12, v2_1=True)),
    StandIn("tiny21.pt", "torch", link_to(REFERENCE_DIR / "vjepa2_1" / "checkpoint_gg.pt")),
    # The upstream code's tiny models of the reference bundles (../shared/reference): a V-JEPA 2-AC
    # .pt in Meta's layout and a LeWM weights.pt + config.json directory.
    StandIn("vjepa2-ac-vitg.pt", "torch", link_to(AC_BUNDLE / "checkpoint.pt")),
    StandIn("lewm-pusht", "torch", link_to(LEWM_BUNDLE)),
    # MLO-lab's LeVJEPA code on a tiny model, in the HF release's layout (safetensors + config.json).
    StandIn("LeVJEPA-VideoMix-Large", "", link_to(REFERENCE_DIR / "levjepa")),
]


class StandIns:
    def __init__(self, root: Path) -> None:
        self.root = root

    def get(self, s: StandIn) -> Path:
        path = self.root / s.name
        if not path.exists() and not path.is_symlink():
            path.parent.mkdir(parents=True, exist_ok=True)
            s.build(path)
            if not path.is_symlink():
                read_only(path) if path.is_dir() else path.chmod(0o444)
        return path


@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory: pytest.TempPathFactory) -> StandIns:
    return StandIns(tmp_path_factory.mktemp("docs-stand-ins"))


def sandbox(block: Block, template: Path, stand_ins: StandIns, dest: Path) -> Path:
    """A fresh directory with the template's files (links: read-only) and the block's stand-ins."""
    dest.mkdir()
    shutil.copytree(template, dest, dirs_exist_ok=True, copy_function=os.symlink)
    for s in STAND_INS:
        if s.used_by(block):
            (dest / s.name).parent.mkdir(parents=True, exist_ok=True)
            (dest / s.name).symlink_to(stand_ins.get(s))
    return dest


# ---- setups: what the prose leaves to the reader, for the sandbox's models ----------------------

SETUPS: dict[str, str] = {
    # README "Video" and docs/video.md: TINY_VJEPA2 clips (48 px, 4 frames: a 2 x 3 x 3 grid).
    "video": """
import numpy as np
import jepa
clips = np.random.default_rng(0).standard_normal((2, 3, 4, 48, 48)).astype(np.float32)
clip = clips[:1]
tokens = jepa.Model("vjepa2-vitl.gguf").context().encode(clip)
context_ids, target_ids = np.arange(12), np.arange(12, 18)
frames_uint8 = np.random.default_rng(1).integers(0, 256, (4, 64, 64, 3), dtype=np.uint8)
""",
    # V-JEPA 2-AC (the sandbox's random one: 32 px, one 2 x 2 grid of 64-wide latents; 7-D actions).
    "ac": """
import numpy as np
import jepa
from jepa import world
rng = np.random.default_rng(0)
frames = list(rng.integers(0, 256, (2, 64, 64, 3), dtype=np.uint8))
now, goal_frame = frames
candidates = (0.05 * rng.standard_normal((4, 2, 7))).astype(np.float32)  # [K, H, 7]
actions = candidates[:1]                                                  # [B, T, 7] and [K, H, 7]
pose = state = np.array([0.1, 0.2, 0.3, 0, 0, 0, 0], np.float32)
action = actions[0, 0]
latents = rng.standard_normal((1, 2 * 4, 64)).astype(np.float32)          # [B, T*HW, D]
states = np.zeros((1, 2, 7), np.float32)
""",
    # LeWM (TINY_LEWM: 56 px, 64-wide latents, 10-D actions, a 3-frame window).
    "lewm": """
import numpy as np
import jepa
from jepa import world
rng = np.random.default_rng(0)
frames = list(rng.integers(0, 256, (3, 64, 64, 3), dtype=np.uint8))
x = rng.standard_normal((3, 3, 56, 56)).astype(np.float32)
embs = rng.standard_normal((2, 3, 64)).astype(np.float32)        # [B, T, D]
actions = (0.1 * rng.standard_normal((2, 3, 10))).astype(np.float32)   # [B, T, A] and [K, T, A]
candidates = (0.1 * rng.standard_normal((4, 5, 10))).astype(np.float32)  # [K, horizon, A]
goal = rng.standard_normal(64).astype(np.float32)
""",
    # The openai client against a served image model: one PNG, base64.
    "b64_png": """
import base64
b64_png = base64.b64encode(open("b.png", "rb").read()).decode()
""",
}


# ---- running a block ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def block_env(port: int, cache: Path, log: Path) -> dict[str, str]:
    keep = {"JEPA_GEMM", "JEPA_REFERENCE_DIR"}
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith("JEPA_") or k in keep) and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", JEPA_PORT=str(port), JEPA_CACHE_DIR=str(cache),
               DOCS_SERVER_LOG=str(log), PYTHONUNBUFFERED="1")
    return env


@contextmanager
def served(files: tuple[str, ...], port: int, cwd: Path, env: dict[str, str], log: IO[str]) -> Iterator[None]:
    """The `server` directive: jepa-server -m FILE... on the block's port, until /health is 200."""
    cmd = [str(BIN / "jepa-server"), *(a for f in files for a in ("-m", f)), "--host", "127.0.0.1",
           "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{' '.join(cmd)}: no /health (exit {proc.returncode})")
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_process(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run to the end (or BLOCK_TIMEOUT_S), the whole process group killed after: a block's
    background server never outlives it."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return -1, out + f"\n[timed out after {BLOCK_TIMEOUT_S} s]"
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out


def python_runner(block: Block, code: str) -> str:
    """A script that runs the block's setup, then the block compiled under the doc's name and lines."""
    setup = SETUPS[block.directives.setup] if block.directives.setup else ""
    return ("import ast\n"
            "g = {'__name__': '__main__'}\n"
            f"exec(compile({setup!r}, 'setup {block.directives.setup}', 'exec'), g)\n"
            f"tree = ast.increment_lineno(ast.parse({code!r}), {block.first_code_line - 1})\n"
            f"exec(compile(tree, {str(ROOT / block.doc)!r}, 'exec'), g)  # the block, at its doc's lines\n")


def project_extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def installed_distributions() -> set[str]:
    return {(d.metadata["Name"] or "").lower().replace("_", "-") for d in importlib.metadata.distributions()}


def run_block(block: Block, box: Path, work: Path) -> None:
    port = free_port()
    log_path = work / f"server-{block.line}.log"
    env = block_env(port, work / "cache", log_path)
    if block.lang == "sh":
        script = shell_script(block, port, project_extras(), installed_distributions())
        assert not script.problems, script.problems
        runner = work / f"block-{block.line}.sh"
        runner.write_text(script.text)
        cmd = ["bash", str(runner)]
    else:
        runner = work / f"block-{block.line}.py"
        runner.write_text(python_runner(block, python_source(block, port)))
        cmd = [sys.executable, str(runner)]
    with open(log_path, "a") as log:
        if block.directives.server:
            with served(block.directives.server, port, box, env, log):
                rc, out = run_process(cmd, box, env)
        else:
            rc, out = run_process(cmd, box, env)
    if rc != 0:
        server_log = log_path.read_text() if log_path.exists() else ""
        pytest.fail(f"{block.id} failed (exit {rc}):\n--- block\n{block.code}--- output\n{out[-6000:]}"
                    + (f"\n--- server log\n{server_log[-3000:]}" if server_log else ""), pytrace=False)


def chain_of(block: Block) -> list[Block]:
    """The block, then the blocks it continues (nearest first)."""
    chain = [block]
    while chain[-1].directives.continues:
        chain.append(previous(chain[-1], BLOCKS))
    return chain


def case(block: Block) -> Any:
    marks: list[Any] = []
    if block.directives.skip:
        marks.append(pytest.mark.skip(reason=block.directives.skip))
    needs = {s.marker for b in chain_of(block) for s in STAND_INS if s.used_by(b) and s.marker}
    marks += [getattr(pytest.mark, m) for m in sorted(needs)]
    return pytest.param(block, id=block.id, marks=marks)


@pytest.mark.parametrize("block", [case(b) for b in BLOCKS])
def test_doc_block(block: Block, template: Path, stand_ins: StandIns, tmp_path: Path) -> None:
    chain = chain_of(block)
    box = sandbox(block, template, stand_ins, tmp_path / "sandbox")
    for s in STAND_INS:  # what a block this one continues needs, too
        if any(s.used_by(b) for b in chain[1:]) and not (box / s.name).exists():
            (box / s.name).parent.mkdir(parents=True, exist_ok=True)
            (box / s.name).symlink_to(stand_ins.get(s))
    for b in reversed(chain):
        run_block(b, box, tmp_path)


# ---- the rules themselves -------------------------------------------------------------------------


def test_skips_are_few_and_say_why() -> None:
    skipped = [b for b in BLOCKS if b.directives.skip]
    assert len(skipped) <= MAX_SKIPPED, [b.id for b in skipped]
    assert all(len(b.directives.skip or "") >= 10 for b in skipped)


def test_every_setup_and_stand_in_is_used() -> None:
    used = {b.directives.setup for b in BLOCKS}
    assert set(SETUPS) <= used, set(SETUPS) - used
    assert all(any(s.used_by(b) for b in BLOCKS) for s in STAND_INS)
    assert all(set(b.directives.server) <= {n for ns in MODEL_NAMES.values() for n in ns} for b in BLOCKS)


def test_extract_reads_fences_and_directives() -> None:
    doc = ("text\n<!-- docs-test: skip (needs a GPU) -->\n```sh\nnvidia-smi\n```\n\n```json\n{}\n```\n"
           "<!-- docs-test: server a.gguf b.gguf; setup video -->\n```python\nprint(1)\n```\n")
    a, b = extract(doc, "x.md")
    assert (a.id, a.lang, a.code, a.directives.skip) == ("x.md:3", "sh", "nvidia-smi\n", "needs a GPU")
    assert (b.id, b.lang, b.directives.setup) == ("x.md:11", "python", "video")
    assert b.directives.server == ("a.gguf", "b.gguf")
    assert previous(b, [a, b]) == a
    assert parse_directives("skip (a; b); continues", "x.md:1") == Directives(skip="a; b", continues=True)
    for bad in ("skip", "skip because", "serve a.gguf", "setup", "continues please"):
        with pytest.raises(DirectiveError):
            parse_directives(bad, "x.md:1")
    with pytest.raises(DirectiveError, match="not run"):  # a directive must sit on a block that runs
        extract("<!-- docs-test: skip (no) -->\n```json\n{}\n```\n", "x.md")


def test_shell_rules() -> None:
    code = ("make run  # the demo\n"
            "pip install '.[all]'\n"
            "jepa-server -m vit.gguf --port 8080 --workers 2   # 127.0.0.1:8080\n"
            "curl -s localhost:8080/health \\\n     -H 'a: b'\n"
            "jepa-embed -m demo.gguf broken.jpg\n# jepa-embed: error: broken.jpg: not an image\n"
            "jepa-server check --warm -m vit.gguf\n"
            "jepa-server info --models-dir /srv/models\n"
            "python tools/import_graph.py --check\n")
    block = Block("x.md", 1, "sh", code)
    s = shell_script(block, 5555, {"all"}, set())
    assert s.problems == []
    body = s.text.split("trap docs_stop EXIT\n", 1)[1].splitlines()
    assert body[0] == f"make -n -C {ROOT} run"
    assert body[1].startswith(": ")
    assert body[2] == "docs_serve jepa-server -m vit.gguf --workers 2"
    assert body[3:5] == ["curl -s localhost:5555/health \\", "     -H 'a: b'"]
    assert body[5:8] == ["if", "jepa-embed -m demo.gguf broken.jpg", "then echo " + body[7].split(" ", 2)[2]]
    assert body[9:11] == ["docs_stop", "jepa-server check --warm -m vit.gguf"]
    assert body[12] == "jepa-server info --models-dir srv/models"
    assert body[13] == f"python {ROOT / 'tools/import_graph.py'} --check"
    assert [c for c, _ in commands("a '\nb'\n# out\n")] == ["a '\nb'", "# out"]
    assert [c for c, _ in commands("a |  # c\n  b\nc\n")] == ["a |  # c\n  b", "c"]
    assert pip_problems([".[all,nope]", "numpy", "no-such-dist"], {"all"}, {"numpy"}) == [
        ".[all,nope]: extra(s) ['nope'] not in pyproject.toml",
        "no-such-dist: not installed in the test environment (requirements/*.txt)",
    ]


def test_the_blocks_ids_are_unique() -> None:
    ids = [b.id for b in BLOCKS]
    assert len(ids) == len(set(ids)) and len(ids) > 30
    assert json.dumps(ids)  # plain strings, usable with -k
