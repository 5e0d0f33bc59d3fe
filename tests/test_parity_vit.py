"""Engine vs transformers, token by token, on tiny random ViT / I-JEPA models converted by jepa-convert.

The timm layout (LeJEPA) is checked by re-exporting an HF ViT under timm's names with fused qkv:
the two are the same network, so HF's output is the reference for that file too.
Bars (DESIGN.md): f32, every token cosine >= 0.99999 and max|diff| / max|ref| <= 1e-4;
f16 weights, pooled (mean) cosine >= 0.9999."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jepa.convert import convert

pytestmark = pytest.mark.transformers

# id -> (HF class, layout written, config overrides). Norms are randomised by the fixture.
CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "vit-p16": ("vit", "hf", dict(image_size=64, patch_size=16, num_hidden_layers=3)),
    "vit-p14": ("vit", "hf", dict(image_size=56, patch_size=14, hidden_size=96, num_attention_heads=3)),
    "vit-tanh-noqkvbias": ("vit", "hf", dict(image_size=48, hidden_act="gelu_pytorch_tanh", qkv_bias=False,
                                             layer_norm_eps=1e-6)),
    "ijepa-p16": ("ijepa", "hf", dict(image_size=64, patch_size=16, num_hidden_layers=3)),
    "ijepa-p14": ("ijepa", "hf", dict(image_size=56, patch_size=14, hidden_size=96, num_attention_heads=3)),
    "timm-p16": ("vit", "timm", dict(image_size=64, patch_size=16, layer_norm_eps=1e-6)),
    "timm-p14": ("vit", "timm", dict(image_size=56, patch_size=14, hidden_size=96, num_attention_heads=3,
                                     layer_norm_eps=1e-6)),
}


def _reference(model: Any, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(x)).last_hidden_state.numpy()


def _convert(
    case: str, hf_model, timm_export, tmp_path: Path, ftype: str
) -> tuple[str, np.ndarray, np.ndarray]:
    """Build, save and convert the case's model; return (gguf path, engine tokens, HF tokens)."""
    kind, layout, config = CASES[case]
    src, model = hf_model(kind, **config)
    size = config["image_size"]
    x = np.random.default_rng(1).standard_normal((2, 3, size, size)).astype(np.float32)
    if layout == "timm":
        (tmp_path / "timm").mkdir()
        src = timm_export(src, tmp_path / "timm" / "model.safetensors")
        heads = config.get("num_attention_heads", 4)
        path = convert(src, tmp_path / f"{case}.gguf", ftype=ftype, n_head=heads)
    else:
        path = convert(src, tmp_path / f"{case}.gguf", ftype=ftype)
    return path, _encode(path, x), _reference(model, x)


def _encode(path: str, x: np.ndarray) -> np.ndarray:
    import jepa

    return jepa.Model(path).context(threads=2).encode(x)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return (a64 * b64).sum(-1) / (np.linalg.norm(a64, axis=-1) * np.linalg.norm(b64, axis=-1))


@pytest.mark.parametrize("case", list(CASES))
def test_f32_every_token(case: str, hf_model, timm_export, tmp_path: Path) -> None:
    _, got, ref = _convert(case, hf_model, timm_export, tmp_path, "f32")
    assert got.shape == ref.shape
    cos = _cos(got, ref)
    rel = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"\n[parity] {case} f32: min token cosine {cos.min():.9f}, max|diff|/max|ref| {rel:.3e}")
    assert cos.min() >= 0.99999, f"worst token {np.unravel_index(cos.argmin(), cos.shape)}: {cos.min()}"
    assert rel <= 1e-4


@pytest.mark.parametrize("case", ["vit-p16", "ijepa-p14", "timm-p16"])
def test_f16_pooled(case: str, hf_model, timm_export, tmp_path: Path) -> None:
    _, got, ref = _convert(case, hf_model, timm_export, tmp_path, "f16")
    cos = _cos(got.mean(axis=1), ref.mean(axis=1))
    print(f"\n[parity] {case} f16: min pooled cosine {cos.min():.9f}")
    assert cos.min() >= 0.9999
