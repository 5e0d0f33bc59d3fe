"""Shared fixtures: the tiny models and reference bundles the suite runs on (built once per session),
a GGUF read back, tiny HF / timm / Meta-layout checkpoints to convert, and the tools/ scripts.

torch and transformers are imported inside the fixtures, so collecting the suite never needs them."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

# Golden outputs of the upstream code (../shared/reference, beside the checkout; CI has it too).
REFERENCE_DIR = Path(os.environ.get("JEPA_REFERENCE_DIR", ROOT.parent / "shared" / "reference"))
AC_BUNDLE, LEWM_BUNDLE = REFERENCE_DIR / "vjepa2_ac", REFERENCE_DIR / "lewm"

# The one tiny V-JEPA 2 of the suite: grid 2 x 3 x 3 = 18 tokens at its own size, head width 32.
# Four mask tokens, so a mask index wraps (5 -> 1); six classes, so top-k has room.
TINY_VJEPA2: dict[str, Any] = dict(embed_dim=64, n_head=2, img_size=48, n_frames=4, seed=5)
TINY_VJEPA2_PARTS: dict[str, Any] = dict(
    predictor={"embed_dim": 48, "n_layer": 2, "n_head": 2, "n_mask_tokens": 4},
    head={"n_classes": 6, "n_pool_layers": 1},
)


def pytest_sessionstart(session: pytest.Session) -> None:
    """The reference bundles are part of the test inputs: a run without them is an error, never a
    run that quietly skips the world-model and V-JEPA 2-AC checks."""
    if not AC_BUNDLE.is_dir() or not LEWM_BUNDLE.is_dir():
        raise pytest.UsageError(
            f"reference bundles not found under {REFERENCE_DIR}: the tests need ../shared/reference "
            "beside the checkout (or JEPA_REFERENCE_DIR)"
        )


@pytest.fixture(scope="module", autouse=True)
def _collect_at_module_end() -> Iterator[None]:
    """A leaked socket or file is an error (filterwarnings = error), but Python reports it only when
    the object is collected: on two xdist workers that is some later module's test, a different one
    on each run. Collecting at each module's end pins the ResourceWarning on the module that leaked."""
    yield
    import gc

    gc.collect()


# ---- the two workers of `make py-test` (pytest-xdist, --dist loadgroup) -------------------------

# Modules whose tests may go to either worker one by one: their fixtures are per test (or cheap)
# and each test is long (the atheris targets run for a fixed time each).
UNGROUPED = {"test_fuzz_atheris"}
# Modules that must not run beside each other: each starts a Ray cluster, and Serve's HTTP proxy
# and the GCS have ports of their own.
SHARED_GROUPS = {"test_ray_serve": "ray", "test_ray_serve_run": "ray", "test_ray_bench": "ray"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One xdist group per module (its module-scoped fixtures, servers and models, are then made once,
    on one worker), the Ray modules in one group, and the long independent tests of UNGROUPED left to
    spread. Without xdist there is nothing to mark."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        module = item.module.__name__ if isinstance(item, pytest.Function) and item.module else ""
        if module in UNGROUPED:
            continue
        item.add_marker(pytest.mark.xdist_group(SHARED_GROUPS.get(module, module)))


# ---- the tiny models, written once per session by the project's own writers --------------------


def model_and_context(path_fixture: str, threads: int = 2) -> tuple[Any, Any]:
    """Module-scoped `model` and `ctx` fixtures over one of the session's model files:
    `model, ctx = model_and_context("tiny_ac_path")` at a test module's top level."""

    @pytest.fixture(scope="module")
    def model(request: pytest.FixtureRequest) -> Any:
        import jepa

        return jepa.Model(request.getfixturevalue(path_fixture))

    @pytest.fixture(scope="module")
    def ctx(model: Any) -> Any:
        return model.context(threads=threads)

    return model, ctx


def bits(a: Any) -> np.ndarray:
    """float32 bit patterns, for exact comparison (bit-identity is never a tolerance)."""
    a = np.asarray(a)
    assert a.dtype == np.float32, f"expected float32, got {a.dtype}"
    return np.ascontiguousarray(a).view(np.uint32)


def assert_batch_bits(model: Any, x: np.ndarray) -> Any:
    """Batch and thread bit-identity of model.encode: each item of x encoded alone on one thread has
    the same bits inside the whole batch, encoded on one thread and on two. Returns that one-thread
    context, for the caller's further checks against it."""
    one = model.context(threads=1)
    ref = [bits(one.encode(x[i : i + 1])[0]) for i in range(len(x))]
    for threads in (1, 2):
        batched = model.context(threads=threads).encode(x)
        for i, r in enumerate(ref):
            assert np.array_equal(bits(batched[i]), r), (threads, i)
    return one


def golden(bundle: Path, name: str) -> np.ndarray:
    """One array of a reference bundle (../shared/reference/<bundle>/<name>.npy)."""
    return np.load(bundle / f"{name}.npy")


@pytest.fixture(scope="session")
def tiny_vit_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The demo ViT (CLS, learned positions, 192 wide, 4 layers) at 32 px: 1 + 2 x 2 = 5 tokens."""
    from jepa.demo import write_demo_model

    return write_demo_model(tmp_path_factory.mktemp("vit") / "vit32.gguf", img_size=32)


@pytest.fixture(scope="session")
def wide_vit_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A demo-layout ViT at 224 px (197 tokens, 128 wide, 4 layers): an encode long enough to time
    (tens of ms for 8 images on one thread) and attention that needs kernel scratch."""
    from jepa.demo import write_demo_model

    path = tmp_path_factory.mktemp("vit") / "vit224.gguf"
    return write_demo_model(path, embed_dim=128, n_layer=4, n_head=4, patch_size=16, img_size=224, seed=5)


@pytest.fixture(scope="session")
def tiny_vjepa2_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """TINY_VJEPA2 with its masked predictor and attentive classifier head (numpy only, no torch)."""
    from jepa.testing.random_vjepa2 import write_random_vjepa2

    path = tmp_path_factory.mktemp("vjepa2") / "full.gguf"
    return write_random_vjepa2(path, **TINY_VJEPA2, **TINY_VJEPA2_PARTS)


@pytest.fixture(scope="session")
def tiny_vjepa2_encoder_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """TINY_VJEPA2's encoder alone: no predictor, no head (what the refusals need)."""
    from jepa.testing.random_vjepa2 import write_random_vjepa2

    return write_random_vjepa2(tmp_path_factory.mktemp("vjepa2") / "encoder.gguf", **TINY_VJEPA2)


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    return REFERENCE_DIR


@pytest.fixture(scope="session")
def ac_bundle() -> Path:
    """Meta's V-JEPA 2-AC code on a tiny random model: checkpoint.pt, hparams.json, goldens."""
    return AC_BUNDLE


@pytest.fixture(scope="session")
def lewm_bundle() -> Path:
    """The LeWM code on a tiny random model: weights.pt, config.json, hparams.json, goldens."""
    return LEWM_BUNDLE


@pytest.fixture(scope="session")
def tiny_ac_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The AC bundle's checkpoint as a GGUF, at the bundle's image size and predictor head width."""
    from jepa.convert import convert

    hp = json.loads((AC_BUNDLE / "hparams.json").read_text())
    out = tmp_path_factory.mktemp("ac") / "ac.gguf"
    return convert(AC_BUNDLE / "checkpoint.pt", out, family="vjepa2_ac", img_size=int(hp["img_size"]),
                   head_dim=int(hp["predictor_derived"]["head_dim"]))


@pytest.fixture(scope="session")
def tiny_lewm_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The LeWM bundle as a GGUF."""
    from jepa.convert import convert

    return convert(LEWM_BUNDLE, tmp_path_factory.mktemp("lewm") / "lewm.gguf", family="lewm")


def _kernel_path_models(d: Path, vit: str, vjepa2: str, ac: str, lewm: str) -> Path:
    """The JSON file tests/kernel_path_outputs.py reads: every kind, the ViT in f32, f16, bf16, q8_0
    and i8c."""
    from jepa.convert.quantize import quantize
    from jepa.testing.random_text import write_random_bert

    models = {"vit": vit, "vjepa2": vjepa2, "ac": ac, "lewm": lewm,
              "text": write_random_bert(d / "text.gguf", max_seq_len=24), "reference": str(REFERENCE_DIR)}
    for t in ("f16", "bf16", "q8_0", "i8c"):
        quantize(vit, d / f"vit_{t}.gguf", t)
        models[f"vit_{t}"] = str(d / f"vit_{t}.gguf")
    spec = d / "models.json"
    spec.write_text(json.dumps(models))
    return spec


@pytest.fixture(scope="session")
def kernel_path_models(tmp_path_factory: pytest.TempPathFactory, wide_vit_path: str, tiny_vjepa2_path: str,
                       tiny_ac_path: str, tiny_lewm_path: str) -> Path:
    """The models of the every-path comparison (test_kernel_paths), the 224 px ViT among them."""
    return _kernel_path_models(tmp_path_factory.mktemp("paths"), wide_vit_path, tiny_vjepa2_path,
                               tiny_ac_path, tiny_lewm_path)


@pytest.fixture(scope="session")
def emulated_path_models(tmp_path_factory: pytest.TempPathFactory, tiny_vjepa2_path: str, tiny_ac_path: str,
                         tiny_lewm_path: str) -> Path:
    """The same kinds for a run under an emulated CPU (test_portable_wheel), where an encode costs ~300x:
    the ViT at 96 px (37 tokens, an odd count: row tails in every product and attention past one
    16-row block; 128 wide, 4 layers, MLP 512 as the 224 px one), ~5x less arithmetic. The 224 px
    ViT's bits on the AVX2 path are test_kernel_paths' (JEPA_GEMM=avx2)."""
    from jepa.demo import write_demo_model

    d = tmp_path_factory.mktemp("emulated")
    vit = write_demo_model(d / "vit96.gguf", embed_dim=128, n_layer=4, n_head=4, patch_size=16, img_size=96,
                           seed=5)
    return _kernel_path_models(d, vit, tiny_vjepa2_path, tiny_ac_path, tiny_lewm_path)


# ---- tools/ scripts ----------------------------------------------------------------------------


def run_tool(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """tools/<script> in a fresh interpreter, as the docs run it: `python tools/gen_stubs.py`, and
    every benchmark a module of tools/bench/ run as a script (`run_tool("bench/engine.py", "--smoke")`)."""
    cmd = [sys.executable, str(ROOT / "tools" / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def smoke_record(script: str, out: Path, *args: str, timeout: float = 300) -> dict[str, Any]:
    """tools/<script> --smoke ... --out <out> (a benchmark: "bench/engine.py"), which must succeed; the
    JSON record it wrote."""
    r = run_tool(script, "--smoke", *args, "--out", str(out), timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def import_tool(name: str) -> ModuleType:
    """tools/<name>.py as a module, tools/ on the path while it loads: a script of tools/ by its name
    ("render_docs"), a benchmark's module of the bench package by its dotted one ("bench.engine")."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


@dataclass
class GGUFContents:
    keys: dict[str, Any]
    shapes: dict[str, tuple[int, ...]]  # numpy order, as the writer was given them
    dtypes: dict[str, str]  # "F32" / "F16"
    arrays: dict[str, np.ndarray]


def read_gguf(path: str | Path) -> GGUFContents:
    import gguf

    r = gguf.GGUFReader(path)
    keys = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    shapes = {t.name: tuple(int(n) for n in reversed(t.shape)) for t in r.tensors}
    dtypes = {t.name: t.tensor_type.name for t in r.tensors}
    arrays = {t.name: np.array(t.data).reshape(shapes[t.name]) for t in r.tensors}
    return GGUFContents(keys, shapes, dtypes, arrays)


@pytest.fixture
def gguf_contents() -> Callable[[str | Path], GGUFContents]:
    return read_gguf


def randomise_norms(model: Any, g: Any) -> None:
    """LayerNorm gains/biases away from 1/0 (drawn from torch.Generator g), so a wrong or missing
    norm cannot hide."""
    import torch

    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.copy_(1.0 + 0.2 * torch.randn(mod.weight.shape, generator=g))
                mod.bias.copy_(0.2 * torch.randn(mod.bias.shape, generator=g))


def build_hf_model(
    out_dir: Path, kind: str = "vit", *, seed: int = 0, **config: Any
) -> tuple[Path, Any]:
    """Save a tiny random ViTModel ("vit") or IJepaModel ("ijepa") with save_pretrained; return
    (dir, model in eval mode)."""
    import torch
    from transformers import IJepaConfig, IJepaModel, ViTConfig, ViTModel

    cfg = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
               image_size=32, patch_size=16)
    cfg.update(config)
    torch.manual_seed(seed)
    if kind == "vit":
        model = ViTModel(ViTConfig(**cfg), add_pooling_layer=False)
    elif kind == "ijepa":
        model = IJepaModel(IJepaConfig(**cfg), add_pooling_layer=False)
    else:
        raise ValueError(kind)
    randomise_norms(model, torch.Generator().manual_seed(seed + 1))
    model.eval()
    model.save_pretrained(out_dir)
    return out_dir, model


QKV = ("query", "key", "value")
# timm / Meta block parameter -> the HF ViT module it comes from, under encoder.layer.{i}.
HF_VIT_BLOCK = {
    "norm1": "layernorm_before",
    "norm2": "layernorm_after",
    "attn.proj": "attention.output.dense",
    "mlp.fc1": "intermediate.dense",
    "mlp.fc2": "output.dense",
}


def fused_qkv_blocks(
    hf: Mapping[str, Any], names: Mapping[str, str], qkv: str, concat: Callable[[list[Any]], Any]
) -> dict[str, Any]:
    """HF encoder layers -> timm / Meta `blocks.{i}.*` (weights and biases), query / key / value fused
    into attn.qkv. names maps each unfused timm parameter to its HF module (HF_VIT_BLOCK for ViT);
    qkv is the HF module of the three projections with "{}" for query / key / value."""
    out: dict[str, Any] = {}
    i = 0
    while f"encoder.layer.{i}.{names['norm1']}.weight" in hf:
        src, dst = f"encoder.layer.{i}.", f"blocks.{i}."
        for p in ("weight", "bias"):
            for theirs, ours in names.items():
                out[f"{dst}{theirs}.{p}"] = hf[f"{src}{ours}.{p}"]
            out[f"{dst}attn.qkv.{p}"] = concat([hf[src + qkv.format(n) + "." + p] for n in QKV])
        i += 1
    return out


def export_timm_layout(hf_dir: Path, out_file: Path, *, prefix: str = "backbone.") -> Path:
    """Re-export a saved HF ViT's weights under timm's names (fused qkv), as LeJEPA ships them.

    The two architectures are the same network, so the HF model is the reference for this file."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(hf_dir / "model.safetensors"), framework="np") as f:
        hf = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not a Mapping
    out = {
        "cls_token": hf["embeddings.cls_token"],
        "pos_embed": hf["embeddings.position_embeddings"],
        "patch_embed.proj.weight": hf["embeddings.patch_embeddings.projection.weight"],
        "patch_embed.proj.bias": hf["embeddings.patch_embeddings.projection.bias"],
        "norm.weight": hf["layernorm.weight"],
        "norm.bias": hf["layernorm.bias"],
    }
    out |= fused_qkv_blocks(hf, HF_VIT_BLOCK, "attention.attention.{}", np.concatenate)
    save_file({prefix + k: np.ascontiguousarray(v) for k, v in out.items()}, str(out_file))
    return out_file


def random_meta_pt(out: Path, width: int, depth: int = 1, ffn: int = 64, v2_1: bool = False) -> None:
    """A Meta-layout V-JEPA 2 encoder .pt (module.backbone., fused qkv), random; width 768 is a
    standard size (ViT-B: 12 heads), so it converts without --n-head. v2_1: a V-JEPA 2.1 one (the
    image patch embedding, the modality vectors, four level norms for depth 12 and no final norm;
    bf16, to stay small at a released width)."""
    import torch

    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> Any:
        x = 0.02 * torch.randn(*shape, generator=g)
        return x.to(torch.bfloat16) if v2_1 else x

    enc = {"patch_embed.proj.weight": r(width, 3, 2, 16, 16), "patch_embed.proj.bias": r(width)}
    if v2_1:
        enc |= {"patch_embed_img.proj.weight": r(width, 3, 1, 16, 16), "patch_embed_img.proj.bias": r(width),
                "video_mod_embed": r(1, 1, width), "img_mod_embed": r(1, 1, width)}
        enc |= {f"norms_block.{k}.{w}": r(width) + (1 if w == "weight" else 0) for k in range(4)
                for w in ("weight", "bias")}
    else:
        enc |= {"norm.weight": 1 + r(width), "norm.bias": r(width)}
    for i in range(depth):
        shapes = {"norm1": (width,), "norm2": (width,), "attn.qkv": (3 * width, width),
                  "attn.proj": (width, width), "mlp.fc1": (ffn, width), "mlp.fc2": (width, ffn)}
        for name, shape in shapes.items():
            enc[f"blocks.{i}.{name}.weight"] = r(*shape) + (1 if name.startswith("norm") else 0)
            enc[f"blocks.{i}.{name}.bias"] = r(shape[0])
    key = "ema_encoder" if v2_1 else "target_encoder"
    torch.save({key: {f"module.backbone.{k}": v for k, v in enc.items()}}, out)


@pytest.fixture
def hf_model(tmp_path: Path) -> Callable[..., tuple[Path, Any]]:
    """hf_model(kind="vit"|"ijepa", seed=0, **config) -> (saved dir, eval-mode torch model)."""
    counter = iter(range(1_000_000))

    def make(kind: str = "vit", *, seed: int = 0, **config: Any) -> tuple[Path, Any]:
        return build_hf_model(tmp_path / f"{kind}-{next(counter)}", kind, seed=seed, **config)

    return make


@pytest.fixture
def timm_export() -> Callable[..., Path]:
    """timm_export(hf_dir, out_file, prefix="backbone.") -> out_file."""
    return export_timm_layout
