"""Shared fixtures: read a GGUF back, and build tiny HF / timm-layout checkpoints to convert.

torch and transformers are imported inside the fixtures, so collecting the suite never needs them."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# Golden outputs of the upstream code (../shared/reference, beside the checkout; CI has it too).
REFERENCE_DIR = Path(
    os.environ.get("JEPA_REFERENCE_DIR", Path(__file__).resolve().parents[2] / "shared" / "reference")
)


def pytest_sessionstart(session: pytest.Session) -> None:
    """The reference bundles are part of the test inputs: a run without them is an error, never a
    run that quietly skips the world-model and V-JEPA 2-AC checks."""
    if not (REFERENCE_DIR / "vjepa2_ac").is_dir() or not (REFERENCE_DIR / "lewm").is_dir():
        raise pytest.UsageError(
            f"reference bundles not found under {REFERENCE_DIR}: the tests need ../shared/reference "
            "beside the checkout (or JEPA_REFERENCE_DIR)"
        )


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


def _randomise_norms(model: Any, seed: int) -> None:
    """LayerNorm gains/biases away from 1/0, so a wrong or missing norm cannot hide."""
    import torch

    g = torch.Generator().manual_seed(seed)
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
    _randomise_norms(model, seed + 1)
    model.eval()
    model.save_pretrained(out_dir)
    return out_dir, model


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
    i = 0
    while f"encoder.layer.{i}.layernorm_before.weight" in hf:
        src, dst = f"encoder.layer.{i}.", f"blocks.{i}."
        att = src + "attention.attention."
        for p in ("weight", "bias"):
            out[f"{dst}norm1.{p}"] = hf[f"{src}layernorm_before.{p}"]
            out[f"{dst}norm2.{p}"] = hf[f"{src}layernorm_after.{p}"]
            qkv = [hf[f"{att}{n}.{p}"] for n in ("query", "key", "value")]
            out[f"{dst}attn.qkv.{p}"] = np.concatenate(qkv)
            out[f"{dst}attn.proj.{p}"] = hf[f"{src}attention.output.dense.{p}"]
            out[f"{dst}mlp.fc1.{p}"] = hf[f"{src}intermediate.dense.{p}"]
            out[f"{dst}mlp.fc2.{p}"] = hf[f"{src}output.dense.{p}"]
        i += 1
    save_file({prefix + k: np.ascontiguousarray(v) for k, v in out.items()}, str(out_file))
    return out_file


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
