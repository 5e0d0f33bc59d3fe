"""The engine on V-JEPA 2.1 against the upstream code: the reference bundle (../shared/reference/vjepa2_1:
Meta's app/vjepa_2_1 VisionTransformer at 204698b, random weights, real frames), its two checkpoints
converted by jepa-convert (`bl`: the distilled ViT-B/L kind, 1 head of 64, from `ema_encoder`; `gg`:
the ViT-g/G kind, 2 heads of 16, from `target_encoder`), encoded by jepa.Context and compared with the
goldens at the project's bars (every token cosine >= 0.99999, max|d| / max|ref| <= 1e-4): the clip
(tubelet 2, the video modality vector), the still image (T = 1: the tubelet-1 embedding and the image
modality vector), the non-square clip (RoPE rows and columns interpolated with different factors),
the four levels side by side (return_hierarchical); the pipeline from the bundle's uint8 frames and
the server; then batch and thread bit-identity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import jepa
from jepa.convert import convert

from conftest import REFERENCE_DIR, bits
from numpy_reference import assert_agrees

BUNDLE = REFERENCE_DIR / "vjepa2_1"
HEADS = {"bl": 1, "gg": 2}  # the bundle's encoders (hparams.json): no config.json beside them
WIDTH = {"bl": 64, "gg": 32}
pytestmark = [pytest.mark.torch, pytest.mark.every_path]


def g(name: str) -> np.ndarray:
    return np.load(BUNDLE / f"{name}.npy")


@pytest.fixture(scope="module", params=sorted(HEADS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def path(kind: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp(f"vjepa2_1-{kind}") / f"{kind}.gguf"
    return convert(BUNDLE / f"checkpoint_{kind}.pt", out, n_head=HEADS[kind], img_size=64)


@pytest.fixture(scope="module")
def model(path: str) -> jepa.Model:
    return jepa.Model(path)


@pytest.fixture(scope="module")
def ctx(model: jepa.Model) -> jepa.Context:
    return model.context(threads=2)


def test_the_model_reads_the_file(model: jepa.Model, kind: str) -> None:
    info = model.info
    assert (info.family, info.modality, info.tubelet_size) == ("vjepa2_1", "video", 2)
    assert info.embed_dim == WIDTH[kind] and info.image_patch_embed
    assert not model.has_cls and model.n_prefix == 0
    assert model.n_tokens(4, 64, 64) == g(f"{kind}_enc_video").shape[1] == 32
    assert model.n_tokens(1, 64, 64) == g(f"{kind}_enc_image").shape[1] == 16  # tubelet 1 for a still image
    assert model.n_tokens(4, 64, 96) == g(f"{kind}_enc_wide").shape[1]


@pytest.mark.parametrize("inputs", ["video", "image", "wide"])
def test_encoder(ctx: jepa.Context, kind: str, inputs: str) -> None:
    golden = f"{kind}_enc_{inputs}"
    assert_agrees(ctx.encode(g(f"input_{inputs}")), g(golden), golden)


@pytest.mark.parametrize("inputs", ["video", "image"])
def test_the_levels(ctx: jepa.Context, model: jepa.Model, kind: str, inputs: str) -> None:
    """encode(levels=True): the four per-level norms, level k at features [k D, (k + 1) D); the last
    is encode()'s output bit for bit."""
    golden, x = f"{kind}_enc_{inputs}_hier", g(f"input_{inputs}")
    levels = ctx.encode(x, levels=True)
    assert model.info.n_levels == 4 and levels.shape[-1] == 4 * WIDTH[kind]
    assert_agrees(levels, g(golden), golden)
    assert np.array_equal(bits(levels[..., 3 * WIDTH[kind] :]), bits(ctx.encode(x)))


def test_a_one_level_model_refuses_levels(tiny_vjepa2_encoder_path: str) -> None:
    ctx = jepa.Model(tiny_vjepa2_encoder_path).context(threads=1)
    with pytest.raises(jepa.UnsupportedError, match="one output level"):
        ctx.encode(np.zeros((1, 3, 2, 32, 32), np.float32), levels=True)


def test_the_pipeline_from_uint8_frames(ctx: jepa.Context) -> None:
    """jepa.embed on the bundle's uint8 frames: a clip takes the video path (32 tokens), a still image
    the one-frame path (16), each the bits of encoding what jepa.media.prepare makes of it. The recipe
    is V-JEPA 2's, unchanged in 2.1 (the bundle's README), whose arithmetic test_media_parity holds to
    the upstream transforms; the bundle's own inputs skipped its resize and crop, so they are not it."""
    from jepa import media

    for item, n in ((g("frames_u8")[0], 32), (g("image_u8")[0, 0], 16)):
        tokens = jepa.embed(ctx, [item], pool="none")
        assert tokens.shape == (1, n, ctx.model.info.embed_dim)
        assert np.array_equal(bits(tokens), bits(ctx.encode(media.prepare(item, ctx.model)[None])))
        mean = jepa.embed(ctx, [item])  # no CLS: the mean of the patch tokens by default
        assert np.array_equal(bits(mean), bits(tokens.mean(axis=1, dtype=np.float32)))


def test_the_server_gives_the_pipeline_bits(tmp_path: Path) -> None:
    """/v1/embeddings on a PNG of the still image: the library's bits (one kind is enough here)."""
    import io

    from PIL import Image
    from test_server_support import b64, decode_embeddings, http, server_process

    path = convert(BUNDLE / "checkpoint_bl.pt", tmp_path / "bl.gguf", n_head=1, img_size=64)
    ctx = jepa.Model(path).context(threads=2)
    buf = io.BytesIO()
    Image.fromarray(g("image_u8")[0, 0]).save(buf, "PNG")
    with server_process("-m", path, "--port", "0") as server:
        body = {"input": [{"b64": b64(buf.getvalue())}], "encoding_format": "base64"}
        reply = http(server.url + "/v1/embeddings", "POST", body)
        assert reply.status == 200, reply.body
        served = decode_embeddings(reply.json())
    assert np.array_equal(bits(served), bits(jepa.embed(ctx, [g("image_u8")[0, 0]])))


def test_one_patch_row_is_refused(ctx: jepa.Context) -> None:
    """Upstream's interpolation divides by (side - 1): a one-patch-high input has no position."""
    with pytest.raises(jepa.InvalidInputError, match="one patch high or wide"):
        ctx.encode(np.zeros((1, 3, 2, 16, 64), np.float32))


def test_batch_and_threads_give_the_same_bits(model: jepa.Model) -> None:
    video = g("input_video")
    x = np.concatenate([video, video[:, :, ::-1].copy()])
    one = model.context(threads=1)
    ref = [one.encode(x[i : i + 1])[0] for i in range(2)]
    for threads in (1, 2):
        batched = model.context(threads=threads).encode(x)
        for i in range(2):
            assert np.array_equal(bits(batched[i]), bits(ref[i])), (threads, i)
    image = g("input_image")
    pair = np.concatenate([image, image[:, :, :, ::-1].copy()])
    assert np.array_equal(bits(model.context(threads=2).encode(pair)[0]), bits(one.encode(image)[0]))
    levels = model.context(threads=2).encode(x, levels=True)
    assert np.array_equal(bits(levels[1]), bits(one.encode(x[1:], levels=True)[0]))


def test_the_v_jepa_2_converter_does_not_take_it(tmp_path: Path) -> None:
    """Auto-detection picks vjepa2_1 alone; forcing vjepa2 on a 2.1 checkpoint is refused, naming what
    V-JEPA 2 has no place for, not converted into a file that drops the image path and the levels."""
    from jepa.convert import vjepa2_meta

    assert not vjepa2_meta.detect(BUNDLE / "checkpoint_bl.pt")
    with pytest.raises(ValueError, match=r"a V-JEPA 2.1 encoder .*--family vjepa2_1"):
        convert(BUNDLE / "checkpoint_bl.pt", tmp_path / "x.gguf", family="vjepa2", n_head=1)
