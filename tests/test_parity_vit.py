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

# Every test is parity in the exact class (f32, f16): the default path alone runs it (`pytest -m parity`).
pytestmark = [pytest.mark.transformers, pytest.mark.every_path, pytest.mark.parity]

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


def _timm_reference(sd: dict[str, np.ndarray], x: np.ndarray, n_head: int) -> np.ndarray:
    """timm's VisionTransformer forward (eps 1e-6, exact GELU), in float64 from timm-named weights."""
    import torch
    import torch.nn.functional as F

    t = {k.removeprefix("backbone."): torch.from_numpy(v).double() for k, v in sd.items()}
    d = t["norm.weight"].shape[0]
    h = F.conv2d(torch.from_numpy(x).double(), t["patch_embed.proj.weight"], t["patch_embed.proj.bias"],
                 stride=t["patch_embed.proj.weight"].shape[-1])
    h = h.flatten(2).transpose(1, 2)
    b = h.shape[0]
    cls = t["cls_token"].expand(b, -1, -1)
    regs = t["reg_token"].expand(b, -1, -1) if "reg_token" in t else cls[:, :0]
    if t["pos_embed"].shape[1] == h.shape[1]:  # no_embed_class: prefix tokens carry no position
        h = torch.cat([cls, regs, h + t["pos_embed"]], 1)
    else:
        h = torch.cat([cls, h], 1) + t["pos_embed"]
        h = torch.cat([h[:, :1], regs, h[:, 1:]], 1)
    i = 0
    while f"blocks.{i}.norm1.weight" in t:
        p = f"blocks.{i}."
        y = F.layer_norm(h, (d,), t[p + "norm1.weight"], t[p + "norm1.bias"], 1e-6)
        q, k, v = F.linear(y, t[p + "attn.qkv.weight"], t[p + "attn.qkv.bias"]).chunk(3, -1)
        q, k, v = (z.unflatten(-1, (n_head, -1)).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
        h = h + t.get(p + "ls1.gamma", 1.0) * F.linear(y, t[p + "attn.proj.weight"], t[p + "attn.proj.bias"])
        y = F.layer_norm(h, (d,), t[p + "norm2.weight"], t[p + "norm2.bias"], 1e-6)
        y = F.linear(F.gelu(F.linear(y, t[p + "mlp.fc1.weight"], t[p + "mlp.fc1.bias"])),
                     t[p + "mlp.fc2.weight"], t[p + "mlp.fc2.bias"])
        h = h + t.get(p + "ls2.gamma", 1.0) * y
        i += 1
    return F.layer_norm(h, (d,), t["norm.weight"], t["norm.bias"], 1e-6).float().numpy()


def test_timm_registers_layer_scale(hf_model, timm_export, tmp_path: Path) -> None:
    """Registers, layer scale and a position table without a CLS slot (timm no_embed_class), which
    no transformers class has: checked against a timm-faithful torch forward, itself checked on HF."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    hf_dir, model = hf_model("vit", image_size=64, layer_norm_eps=1e-6, num_hidden_layers=3)
    (tmp_path / "timm").mkdir()
    path = timm_export(hf_dir, tmp_path / "timm" / "model.safetensors")
    with safe_open(str(path), framework="np") as f:
        sd = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not a Mapping
    x = np.random.default_rng(2).standard_normal((2, 3, 64, 64)).astype(np.float32)
    ref_hf = _reference(model, x)
    assert _cos(_timm_reference(sd, x, 4), ref_hf).min() >= 0.99999  # the reference is right

    rng = np.random.default_rng(3)
    sd["backbone.reg_token"] = (rng.standard_normal((1, 4, 64)) * 0.5).astype(np.float32)
    sd["backbone.pos_embed"] = np.ascontiguousarray(sd["backbone.pos_embed"][:, 1:])
    for i in range(3):
        for n in ("ls1", "ls2"):
            sd[f"backbone.blocks.{i}.{n}.gamma"] = (0.5 + rng.random(64)).astype(np.float32)
    save_file(sd, str(path))
    got = _encode(convert(path, tmp_path / "reg.gguf", n_head=4), x)
    ref = _timm_reference(sd, x, 4)
    assert got.shape == ref.shape == (2, 1 + 4 + 16, 64)
    cos = _cos(got, ref)
    rel = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"\n[parity] timm-reg4-ls f32: min token cosine {cos.min():.9f}, max|diff|/max|ref| {rel:.3e}")
    assert cos.min() >= 0.99999
    assert rel <= 1e-4
