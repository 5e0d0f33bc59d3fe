"""V-JEPA 2 engine vs transformers: tiny random VJEPA2ForVideoClassification models (norms, the
pooler's query and the predictor's mask tokens randomised; inputs at the config's crop size, since HF
builds its RoPE grid from the config), converted by jepa-convert and compared.

Bars (DESIGN.md): f32 encoder every token cosine >= 0.99999 and max|diff| / max|ref| <= 1e-4; the
masked predictor likewise for given context / target ids; classifier logits rel <= 1e-4 with the same
top-1; f16 weights: pooled cosine >= 0.9999 and the same top-1. Head dims 32, 64 and 80 exercise the
RoPE split (per-axis 10, 20, 26 dims) and its unrotated tail (2, 4, 2 dims)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import jepa
from jepa.convert import convert

from conftest import randomise_norms

pytestmark = pytest.mark.transformers

# id -> VJEPA2Config overrides. Two heads each; the head width is hidden_size / 2.
CASES: dict[str, dict[str, Any]] = {
    "hd32": dict(hidden_size=64, crop_size=48, frames_per_clip=6),
    "hd64": dict(hidden_size=128, crop_size=64, frames_per_clip=4, qkv_bias=False),
    # ViT-g's MLP ratio (48/11): int(160 * 48 / 11) = 698, read from the file.
    "hd80": dict(hidden_size=160, crop_size=48, frames_per_clip=4, mlp_ratio=48 / 11),
}
BASE = dict(num_attention_heads=2, num_hidden_layers=2, num_pooler_layers=2, num_labels=7,
            layer_norm_eps=1e-6, pred_hidden_size=64, pred_num_attention_heads=2, pred_num_hidden_layers=2)


def build_vjepa2(out_dir: Path, seed: int = 0, **config: Any) -> tuple[Path, Any]:
    """save_pretrained a tiny random VJEPA2ForVideoClassification; return (dir, eval-mode model)."""
    import torch
    from transformers import VJEPA2Config, VJEPA2ForVideoClassification

    torch.manual_seed(seed)
    model = VJEPA2ForVideoClassification(VJEPA2Config(**(BASE | config)))
    g = torch.Generator().manual_seed(seed + 1)
    randomise_norms(model, g)
    with torch.no_grad():
        # Zero-initialised upstream: random here, so a wrong mask token or query cannot hide.
        emb = model.vjepa2.predictor.embeddings
        emb.mask_tokens.copy_(torch.randn(emb.mask_tokens.shape, generator=g))
        model.pooler.query_tokens.copy_(torch.randn(model.pooler.query_tokens.shape, generator=g))
        # Spread the classifier so top-1 has a margin f16 weights cannot flip.
        model.classifier.weight.mul_(4.0)
    model.eval()
    model.save_pretrained(out_dir)
    return out_dir, model


def clip(cfg: dict[str, Any], batch: int = 2, frames: int | None = None, seed: int = 1) -> np.ndarray:
    size = cfg["crop_size"]
    t = frames or cfg["frames_per_clip"]
    return np.random.default_rng(seed).standard_normal((batch, 3, t, size, size)).astype(np.float32)


def hf_tokens(model: Any, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():  # HF takes [B, T, C, H, W]
        out = model.vjepa2(
            pixel_values_videos=torch.from_numpy(x).permute(0, 2, 1, 3, 4), skip_predictor=True
        )
    return out.last_hidden_state.numpy()


def hf_head(model: Any, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import torch

    with torch.no_grad():
        pooled = model.pooler(torch.from_numpy(tokens))
        return model.classifier(pooled).numpy(), pooled.numpy()


def hf_predict(model: Any, tokens: np.ndarray, ctx_ids: np.ndarray, tgt_ids: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        cm = [torch.from_numpy(ctx_ids.astype(np.int64))]
        tm = [torch.from_numpy(tgt_ids.astype(np.int64))]
        return model.vjepa2.predictor(torch.from_numpy(tokens), cm, tm).last_hidden_state.numpy()


def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return (a64 * b64).sum(-1) / (np.linalg.norm(a64, axis=-1) * np.linalg.norm(b64, axis=-1))


def rel(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def assert_close(
    what: str, got: np.ndarray, ref: np.ndarray, bar_cos: float = 0.99999, bar_rel: float = 1e-4
) -> None:
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    c, r = cos(got, ref), rel(got, ref)
    print(f"\n[parity] {what}: min cosine 1-{1 - c.min():.2e}, max|diff|/max|ref| {r:.3e}")
    assert c.min() >= bar_cos, f"{what}: worst row {np.unravel_index(c.argmin(), c.shape)}: {c.min()}"
    assert r <= bar_rel, f"{what}: rel {r}"


def random_ids(n_tok: int, batch: int, n_ctx: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-item context / target ids, disjoint, in no particular order."""
    rng = np.random.default_rng(seed)
    perms = np.stack([rng.permutation(n_tok) for _ in range(batch)])
    return perms[:, :n_ctx].astype(np.int32), perms[:, n_ctx:].astype(np.int32)


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], Any, str]]:
    """case -> (config, HF model, f32 GGUF path), built once for the module."""
    out = {}
    for case, cfg in CASES.items():
        d = tmp_path_factory.mktemp(case)
        src, model = build_vjepa2(d / "hf", **cfg)
        out[case] = (cfg, model, convert(src, d / "model.gguf"))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_encoder_f32_every_token(case: str, converted) -> None:
    cfg, model, path = converted[case]
    x = clip(cfg)
    got = jepa.Model(path).context(threads=2).encode(x)
    assert_close(f"{case} encoder f32", got, hf_tokens(model, x))


@pytest.mark.parametrize("case", list(CASES))
def test_encoder_f32_flash(case: str, converted) -> None:
    cfg, model, path = converted[case]
    x = clip(cfg)
    got = jepa.Model(path).context(threads=2, flash_attn=True).encode(x)
    assert_close(f"{case} encoder f32 flash", got, hf_tokens(model, x))


@pytest.mark.parametrize("frames", [1, 3, 5])
def test_odd_frame_counts_repeat_the_last_frame(frames: int, converted) -> None:
    # Upstream fills the last tubelet with the last frame; HF does it for T < tubelet itself.
    cfg, model, path = converted["hd64"]
    x = clip(cfg, frames=frames)
    padded = np.concatenate([x, x[:, :, -1:]], axis=2)
    ctx = jepa.Model(path).context(threads=2)
    got = ctx.encode(x)
    assert got.shape[1] == (frames + 1) // 2 * (cfg["crop_size"] // 16) ** 2
    assert got.view(np.uint32).tobytes() == ctx.encode(padded).view(np.uint32).tobytes()
    assert_close(f"hd64 encoder T={frames}", got, hf_tokens(model, padded))
    if frames == 1:
        assert_close("hd64 encoder T=1 vs HF's own repeat", got, hf_tokens(model, x))


@pytest.mark.parametrize("case", list(CASES))
def test_classifier_f32(case: str, converted) -> None:
    cfg, model, path = converted[case]
    x = clip(cfg, batch=3)
    m = jepa.Model(path)
    assert m.labels == [model.config.id2label[i] for i in range(7)]
    tokens = m.context(threads=2).encode(x)
    logits, pooled = m.context(threads=2).classify(tokens)
    ref_logits, ref_pooled = hf_head(model, hf_tokens(model, x))
    assert_close(f"{case} pooled f32", pooled, ref_pooled)
    r = rel(logits, ref_logits)
    print(f"[parity] {case} logits f32: max|diff|/max|ref| {r:.3e}")
    assert r <= 1e-4
    assert (logits.argmax(1) == ref_logits.argmax(1)).all()


@pytest.mark.parametrize("case", list(CASES))
def test_predictor_f32(case: str, converted) -> None:
    cfg, model, path = converted[case]
    x = clip(cfg)
    ctx = jepa.Model(path).context(threads=2)
    tokens = ctx.encode(x)
    n_tok = tokens.shape[1]
    ctx_ids, tgt_ids = random_ids(n_tok, 2, n_tok // 2, seed=7)
    got = ctx.predict(tokens, ctx_ids, tgt_ids)
    ref = hf_predict(model, hf_tokens(model, x), ctx_ids, tgt_ids)
    assert_close(f"{case} predictor f32", got, ref)
    # The same context, given as the gathered rows of an encoder that saw only the context.
    rows = np.take_along_axis(tokens, ctx_ids[:, :, None].astype(np.int64), axis=1)
    again = ctx.predict(rows, ctx_ids, tgt_ids, gathered=True)
    assert again.view(np.uint32).tobytes() == got.view(np.uint32).tobytes()


def test_predictor_shared_ids_and_mask_index(converted) -> None:
    cfg, model, path = converted["hd32"]
    x = clip(cfg)
    ctx = jepa.Model(path).context(threads=2)
    tokens = ctx.encode(x)
    ctx_ids = np.array([0, 2, 4, 5, 9, 11, 20], np.int32)
    tgt_ids = np.array([26, 1, 13], np.int32)
    got = ctx.predict(tokens, ctx_ids, tgt_ids)
    ref = hf_predict(model, hf_tokens(model, x), np.stack([ctx_ids] * 2), np.stack([tgt_ids] * 2))
    assert_close("hd32 predictor, one id list for the batch", got, ref)
    # Another mask token gives another prediction (upstream's default is token 1).
    other = ctx.predict(tokens, ctx_ids, tgt_ids, mask_index=3)
    assert np.abs(other - got).max() > 1e-3


@pytest.mark.parametrize("case", ["hd32", "hd80"])
def test_f16_pooled_and_top1(case: str, converted, tmp_path: Path) -> None:
    cfg, model, _ = converted[case]
    src = Path(converted[case][2]).parent / "hf"
    path = convert(src, tmp_path / "f16.gguf", ftype="f16")
    x = clip(cfg, batch=3)
    ctx = jepa.Model(path).context(threads=2)
    logits, pooled = ctx.classify(ctx.encode(x))
    ref_logits, ref_pooled = hf_head(model, hf_tokens(model, x))
    c = cos(pooled, ref_pooled)
    print(f"\n[parity] {case} pooled f16: min cosine 1-{1 - c.min():.2e}, rel {rel(pooled, ref_pooled):.2e}")
    assert c.min() >= 0.9999
    assert (logits.argmax(1) == ref_logits.argmax(1)).all()
