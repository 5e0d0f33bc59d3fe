"""The engine on LeVJEPA against the upstream code: the reference bundle (../shared/reference/levjepa:
MLO-lab/LeVJEPA's VisionTransformer, tubelet 1, CLS, tiled 3-D RoPE on the patch tokens, block-causal
attention, random weights, real frames) converted by jepa-convert, encoded by jepa.Model, compared with
its goldens at the project's bars (every token cosine >= 0.99999, max|d| / max|ref| <= 1e-4); then
the one embedding pipeline from the bundle's uint8 frames, and batch and thread bit-identity."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import jepa
from jepa.convert import convert

from conftest import REFERENCE_DIR, assert_batch_bits, bits, model_and_context
from numpy_reference import assert_agrees

BUNDLE = REFERENCE_DIR / "levjepa"
T, GRID = 4, 4  # frames, patches per side (64 px, patch 16)
# @pytest.mark.parity: within a tolerance of the goldens in the exact class, run on the default path alone;
# the rest (bit identity, and tests that check bits and a tolerance) on every kernel path.
pytestmark = pytest.mark.every_path


def g(name: str) -> np.ndarray:
    return np.load(BUNDLE / f"{name}.npy")


def clip_of(image: np.ndarray) -> np.ndarray:
    """[B, 3, H, W] -> [B, 3, T, H, W]: upstream's image.unsqueeze(2).repeat(1, 1, T, 1, 1)."""
    return np.ascontiguousarray(np.repeat(image[:, :, None], T, axis=2))


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return convert(BUNDLE, tmp_path_factory.mktemp("levjepa") / "levjepa.gguf")


@pytest.fixture(scope="module")
def full_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The same weights with attn_mode full (tokens_full's model)."""
    d = tmp_path_factory.mktemp("levjepa-full")
    shutil.copy(BUNDLE / "model.safetensors", d / "model.safetensors")
    cfg = json.loads((BUNDLE / "config.json").read_text()) | {"attn_mode": "full"}
    (d / "config.json").write_text(json.dumps(cfg))
    return convert(d, d / "full.gguf")


model, ctx = model_and_context("path")  # over this module's converted file


def test_the_model_reads_the_file(model: jepa.Model) -> None:
    info = model.info
    assert (info.family, info.modality, info.tubelet_size, info.n_frames) == ("levjepa", "video", 1, T)
    assert model.has_cls and model.n_prefix == 1 and info.block_causal
    assert model.n_tokens(T, 64, 64) == 1 + T * GRID * GRID == g("tokens").shape[1]
    assert model.n_tokens(T, 64, 96) == g("tokens_wide").shape[1]


@pytest.mark.parity
@pytest.mark.parametrize(("golden", "inputs"), [
    ("tokens", "input_clip"),
    ("tokens_future", "input_future"),
    ("tokens_wide", "input_wide"),  # a non-square grid: RoPE rows and columns from the input
])
def test_tokens(ctx: jepa.Context, golden: str, inputs: str) -> None:
    assert_agrees(ctx.encode(g(inputs)), g(golden), golden)


@pytest.mark.parity
def test_a_still_image_repeated(ctx: jepa.Context) -> None:
    assert_agrees(ctx.encode(clip_of(g("input_image"))), g("tokens_image"), "tokens_image")


@pytest.mark.parity
def test_the_cls_is_the_pooled_feature(ctx: jepa.Context, model: jepa.Model) -> None:
    tokens = ctx.encode(g("input_clip"))
    assert_agrees(jepa.pool(tokens, None, model), g("cls"), "cls (the default pool)")
    assert_agrees(jepa.pool(tokens, "cls", model), g("cls"), "cls")
    mean = g("tokens")[:, 1:].mean(axis=1)
    assert_agrees(jepa.pool(tokens, "mean", model), mean, "mean of the patch tokens")


@pytest.mark.parity
def test_block_causal(ctx: jepa.Context, full_path: str) -> None:
    """Patch rows of frames 0 .. T/2 - 1 do not see the later frames (upstream's are bit-identical); the
    CLS and later rows do. With attn_mode full the same weights give tokens_full."""
    clip, future = ctx.encode(g("input_clip"))[0], ctx.encode(g("input_future"))[0]
    early = slice(1, 1 + (T // 2) * GRID * GRID)
    d = np.abs(clip[early] - future[early]).max()
    assert d <= 1e-6 * np.abs(clip).max(), f"frames 0..{T // 2 - 1} saw the future: max|d| {d}"
    assert np.abs(clip[0] - future[0]).max() > 0.1  # the CLS sees every frame
    assert np.abs(clip[early.stop :] - future[early.stop :]).max() > 1
    full = jepa.Model(full_path)
    assert not full.info.block_causal
    assert_agrees(full.context(threads=2).encode(g("input_clip")), g("tokens_full"), "tokens_full")


@pytest.mark.parity
def test_the_pipeline_from_uint8_frames(ctx: jepa.Context) -> None:
    """jepa.embed on the bundle's uint8 frames: its recipe (identity resize at 64 px, x / 255, ImageNet)
    gives the bundle's inputs, a still image becomes the model's 4-frame clip, the CLS is the default."""
    clip, image = g("frames_u8")[0], g("image_u8")[0]
    vectors = jepa.embed(ctx, [clip, image])
    assert vectors.shape == (2, 128)
    assert_agrees(vectors[:1], g("cls"), "embed(clip)")
    assert_agrees(vectors[1:], g("tokens_image")[:, 0], "embed(image)")
    tokens = jepa.embed(ctx, [image], pool="none")
    assert_agrees(tokens, g("tokens_image"), "embed(image, pool none)")


def test_batch_and_threads_give_the_same_bits(model: jepa.Model) -> None:
    x = np.concatenate([g("input_clip"), g("input_future")])
    one = assert_batch_bits(model, x)
    second = bits(one.encode(x[1:])[0])
    for threads in (1, 2):
        assert np.array_equal(bits(model.context(threads=threads).encode(x[1:])[0]), second), threads
    wide = g("input_wide")
    pair = np.concatenate([wide, wide[:, :, ::-1].copy()])
    wide_batched = model.context(threads=2).encode(pair)
    assert np.array_equal(bits(wide_batched[0]), bits(one.encode(wide)[0]))


def test_the_server_gives_the_pipeline_bits(path: str, ctx: jepa.Context) -> None:
    """/v1/embeddings on the converted file: a PNG of the bundle's image (a clip of the model's frames)
    and its default, cls and mean pools are jepa.embed's bits."""
    import io

    from PIL import Image
    from test_server_support import b64, decode_embeddings, http, server_process

    buf = io.BytesIO()
    Image.fromarray(g("image_u8")[0]).save(buf, "PNG")
    item = {"b64": b64(buf.getvalue())}
    with server_process("-m", path, "--port", "0") as server:
        for pool in (None, "cls", "mean"):
            body: dict[str, object] = {"input": [item], "encoding_format": "base64"}
            if pool is not None:
                body["pool"] = pool
            reply = http(server.url + "/v1/embeddings", "POST", body)
            assert reply.status == 200, reply.body
            expected = jepa.embed(ctx, [g("image_u8")[0]], pool=pool)
            assert np.array_equal(bits(decode_embeddings(reply.json())), bits(expected)), pool
    assert_agrees(expected, g("tokens_image")[:, 1:].mean(axis=1), "served mean")
