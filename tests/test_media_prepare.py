"""jepa.media.prepare: every kind of item to [C, T, H, W], clips and tubelets, and what it refuses.

The models here are stand-ins with only `info` (all prepare reads), so no engine is needed."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import av
import numpy as np
import pytest
import skimage.data
from PIL import Image

import jepa
from jepa import media

from conftest import bits

RECIPE = SimpleNamespace(  # a jepa.Preprocess stand-in
    resize_mode=jepa.ResizeMode.SHORTEST_EDGE,
    resize_short=40,
    crop=32,
    resample=jepa.Resample.BICUBIC,
    mean=(0.485, 0.456, 0.406),
    std=(0.229, 0.224, 0.225),
    rescale=float(np.float32(1 / 255)),
)


def model(family: str = "hfvit", modality: str = "image", tubelet: int = 1, n_frames: int = 1,
          image_patch_embed: bool = False) -> Any:
    """A jepa.Model stand-in with only the ModelInfo fields prepare reads."""
    info = SimpleNamespace(
        family=family, modality=modality, tubelet_size=tubelet, n_frames=n_frames, preprocess=RECIPE,
        image_patch_embed=image_patch_embed,
    )
    return SimpleNamespace(info=info)


IMAGE = model()
VIDEO = model("vjepa2", "video", tubelet=2, n_frames=4)


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return skimage.data.coffee()[100:260, 150:350]  # 160x200


def png(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    return buf.getvalue()


def mp4(levels: list[int], size: tuple[int, int] = (48, 32)) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as c:
        s = c.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt, s.options = size[0], size[1], "yuv420p", {"qp": "0"}
        for lv in levels:
            c.mux(
                s.encode(
                    av.VideoFrame.from_ndarray(np.full((size[1], size[0], 3), lv, np.uint8), format="rgb24")
                )
            )
        c.mux(s.encode())
    return buf.getvalue()



def test_every_image_form_gives_the_same_input(photo: np.ndarray, tmp_path: Path) -> None:
    path = tmp_path / "p.png"
    path.write_bytes(png(photo))
    ref = media.preprocess_image(Image.fromarray(photo), media.recipe_for(IMAGE))
    for item in (str(path), path, path.read_bytes(), Image.fromarray(photo), photo):
        x = media.prepare(item, IMAGE)
        assert x.dtype == np.float32 and x.shape == (3, 1, 32, 32) and x.flags.c_contiguous
        assert np.array_equal(bits(x[:, 0]), bits(ref))


def test_an_image_for_a_tubelet_2_model_repeats_its_frame(photo: np.ndarray) -> None:
    x = media.prepare(photo, VIDEO)
    assert x.shape == (3, 2, 32, 32)
    assert np.array_equal(bits(x[:, 0]), bits(x[:, 1]))


def test_an_image_for_a_model_with_a_one_frame_embedding_stays_one_frame(photo: np.ndarray) -> None:
    """V-JEPA 2.1 encodes T = 1 with its own tubelet-1 embedding (upstream: the image path); a clip
    still fills its last tubelet."""
    v21 = model("vjepa2_1", "video", tubelet=2, n_frames=4, image_patch_embed=True)
    assert media.prepare(photo, v21).shape == (3, 1, 32, 32)
    assert media.prepare([photo, photo, photo], v21).shape == (3, 4, 32, 32)


def test_a_list_is_one_clip_of_separately_preprocessed_frames(photo: np.ndarray) -> None:
    frames = [photo, photo[:90, :70], Image.fromarray(photo[40:, 20:])]  # sizes differ
    x = media.prepare(frames, VIDEO)
    assert x.shape == (3, 4, 32, 32)  # 3 frames, the last repeated to fill the tubelet
    recipe = media.recipe_for(VIDEO)
    for t, f in enumerate(frames):
        f = f if isinstance(f, Image.Image) else Image.fromarray(f)
        assert np.array_equal(bits(x[:, t]), bits(media.preprocess_image(f, recipe)))
    assert np.array_equal(bits(x[:, 3]), bits(x[:, 2]))


def test_a_uint8_clip_array_and_frames_sampling(photo: np.ndarray) -> None:
    clip = np.stack([np.full_like(photo, 20 * i) for i in range(6)])  # [T, H, W, 3]
    x = media.prepare(clip, VIDEO)
    assert x.shape == (3, 6, 32, 32)
    y = media.prepare(clip, VIDEO, frames=3)  # frames 0, 2, 5, then 5 again
    assert y.shape == (3, 4, 32, 32)
    for t, src in enumerate([0, 2, 5, 5]):
        assert np.array_equal(bits(y[:, t]), bits(x[:, src]))
    z = media.prepare(list(clip), VIDEO, frames=3)
    assert np.array_equal(bits(y), bits(z))


def test_video_file_gives_n_frames(tmp_path: Path) -> None:
    data = mp4([0, 50, 100, 150, 200, 250])
    path = tmp_path / "clip.mp4"
    path.write_bytes(data)
    x = media.prepare(path, VIDEO)  # the model's 4 frames: 0, 2, 3, 5
    assert x.shape == (3, 4, 32, 32)
    assert np.array_equal(bits(x), bits(media.prepare(data, VIDEO)))  # sniffed from bytes too
    assert np.array_equal(bits(media.prepare(data, VIDEO, frames=4)), bits(x))
    assert media.prepare(path, VIDEO, frames=5).shape == (3, 6, 32, 32)  # 5, padded to the tubelet
    one = media.prepare(path, IMAGE)  # an image model samples its one frame: the first
    assert one.shape == (3, 1, 32, 32)
    assert np.array_equal(bits(one[:, 0]), bits(x[:, 0]))


def test_as_video_on_an_animated_gif() -> None:
    frames = [Image.new("RGB", (40, 40), (60 * i, 0, 0)) for i in range(4)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=50)
    data = buf.getvalue()
    assert media.prepare(data, VIDEO).shape == (3, 2, 32, 32)  # an image: its first frame, repeated
    assert media.prepare(data, VIDEO, as_video=False).shape == (3, 2, 32, 32)
    clip = media.prepare(data, VIDEO, as_video=True)  # all 4 frames through FFmpeg
    assert clip.shape == (3, 4, 32, 32)
    assert len({clip[0, t].mean() for t in range(4)}) == 4


def test_as_video_false_refuses_videos_and_lists(photo: np.ndarray) -> None:
    with pytest.raises(jepa.InvalidInputError, match="not an image"):
        media.prepare(mp4([0, 100]), VIDEO, as_video=False)
    with pytest.raises(jepa.InvalidInputError, match="one clip"):
        media.prepare([photo, photo], VIDEO, as_video=False)


def test_image_models_refuse_clips(photo: np.ndarray) -> None:
    with pytest.raises(jepa.InvalidInputError, match="needs a video model"):
        media.prepare([photo, photo], IMAGE)
    assert media.prepare([photo], IMAGE).shape == (3, 1, 32, 32)


@pytest.mark.parametrize(
    ("item", "match"),
    [
        (np.zeros((8, 8, 3), np.float32), "uint8 RGB"),
        (np.zeros((8, 8), np.uint8), "uint8 RGB"),
        (np.zeros((8, 8, 4), np.uint8), "uint8 RGB"),
        (np.zeros((0, 8, 3), np.uint8), "zero-sized"),
        (np.zeros((0, 8, 8, 3), np.uint8), "at least one frame"),
        ([], "at least one frame"),
        (42, "cannot embed a int"),
        (b"neither image nor video" * 20, "not an image or a video"),
    ],
)
def test_refused_items(item: Any, match: str) -> None:
    with pytest.raises(jepa.InvalidInputError, match=match):
        media.prepare(item, VIDEO)


@pytest.mark.parametrize("frames", [0, -1, 2.5, True])
def test_frames_must_be_a_positive_int(photo: np.ndarray, frames: Any) -> None:
    with pytest.raises(jepa.InvalidInputError, match="frames"):
        media.prepare(photo, VIDEO, frames=frames)


def test_recipe_for_names_each_family_arithmetic() -> None:
    expected = {"hfvit": "rescale64", "ijepa": "rescale64", "levjepa": "rescale64", "vjepa2": "fused",
                "vjepa2_1": "fused", "lewm": "rescale32"}  # fmt: skip
    for family, mode in expected.items():
        assert media.recipe_for(model(family))["normalize"] == mode
    recipe = media.recipe_for(IMAGE)
    assert (recipe["resize_mode"], recipe["resample"]) == ("shortest_edge", "bicubic")  # the file's spelling


def test_resized_image_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # A 1-pixel-tall strip resized to short side 40 is 40 x 8000 pixels: over a cap of 100000.
    monkeypatch.setattr(media, "MAX_PIXELS", 100_000)
    with pytest.raises(jepa.InvalidInputError, match="resized image"):
        media.prepare(np.zeros((1, 200, 3), np.uint8), IMAGE)
