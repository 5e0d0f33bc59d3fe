"""jepa.media.decode_image: every format and mode to RGB, and every way a file can be bad."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import skimage.data
from PIL import Image

import jepa
from jepa import media

from conftest import import_tool


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    return Image.fromarray(skimage.data.chelsea()[:120, :160])  # 160x120, real texture


def encoded(img: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height and that has no pixel data."""
    return import_tool("media_samples").png_header(width, height)  # one copy (tools/)


@pytest.mark.parametrize(
    ("fmt", "kw", "lossless"),
    [
        ("PNG", {}, True),
        ("BMP", {}, True),
        ("WEBP", {"lossless": True}, True),
        ("TIFF", {}, True),
        ("JPEG", {"quality": 90}, False),
        ("WEBP", {"quality": 80}, False),
    ],
)
def test_formats_decode_to_rgb(photo: Image.Image, fmt: str, kw: dict, lossless: bool) -> None:
    data = encoded(photo, fmt, **kw)
    img = media.decode_image(data)
    assert img.mode == "RGB" and img.size == photo.size
    if lossless:
        assert np.array_equal(np.asarray(img), np.asarray(photo))
    else:
        # Same bytes as Pillow's own decode: no colour conversion of ours in between.
        assert np.array_equal(np.asarray(img), np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))


def test_path_bytes_and_pil_agree(photo: Image.Image, tmp_path: Path) -> None:
    path = tmp_path / "cat.png"
    photo.save(path)
    ref = np.asarray(media.decode_image(photo))
    for src in (
        str(path),
        path,
        path.read_bytes(),
        bytearray(path.read_bytes()),
        memoryview(path.read_bytes()),
    ):
        assert np.array_equal(np.asarray(media.decode_image(src)), ref)


def test_gif_gives_its_first_frame() -> None:
    frames = [Image.new("RGB", (8, 6), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    data = encoded(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=40)
    img = media.decode_image(data)
    assert img.mode == "RGB" and img.size == (8, 6)
    assert np.all(np.asarray(img) == (255, 0, 0))


def test_modes_convert_like_transformers() -> None:
    """The rules of transformers' convert_to_rgb, checked on known pixels (full parity is in
    test_media_parity.py)."""
    grey = Image.fromarray(np.array([[0, 128, 255]], np.uint8))  # L
    assert np.asarray(media.decode_image(encoded(grey, "PNG"))).tolist() == [[[0] * 3, [128] * 3, [255] * 3]]

    rgba = Image.fromarray(np.array([[[10, 20, 30, 255], [10, 20, 30, 0]]], np.uint8))
    out = np.asarray(media.decode_image(encoded(rgba, "PNG")))
    assert out.tolist() == [[[10, 20, 30], [255, 255, 255]]]  # transparent -> white, not black

    la = Image.fromarray(np.array([[[50, 255], [50, 0]]], np.uint8), "LA")
    assert np.asarray(media.decode_image(encoded(la, "PNG"))).tolist() == [[[50] * 3, [255] * 3]]

    pal = Image.new("P", (2, 1))
    pal.putpalette([200, 0, 0, 0, 0, 200] + [0] * 762)
    pal.putdata([0, 1])
    pal.info["transparency"] = 1  # palette index 1 is transparent
    assert np.asarray(media.decode_image(encoded(pal, "PNG", transparency=1))).tolist() == [
        [[200, 0, 0], [255, 255, 255]]
    ]

    bits = Image.fromarray(np.array([[True, False]]))  # mode 1
    assert np.asarray(media.decode_image(encoded(bits, "PNG"))).tolist() == [[[255] * 3, [0] * 3]]


def test_cmyk_and_16_bit_follow_pillow_convert() -> None:
    cmyk = Image.new("CMYK", (4, 4), (0, 255, 255, 0))  # red in CMYK
    data = encoded(cmyk, "JPEG", quality=95)
    assert Image.open(io.BytesIO(data)).mode == "CMYK"
    out = media.decode_image(data)
    assert out.mode == "RGB"
    assert np.array_equal(np.asarray(out), np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))

    deep = Image.fromarray(np.array([[0, 100, 300, 65535]], np.uint16))
    data = encoded(deep, "PNG")
    assert Image.open(io.BytesIO(data)).mode == "I;16"
    # transformers' convert("RGB") clips 16-bit grey to 0..255; we keep upstream's bytes.
    assert np.asarray(media.decode_image(data))[..., 0].tolist() == [[0, 100, 255, 255]]


def test_exif_orientation_is_applied_to_files(photo: Image.Image) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    data = encoded(photo, "JPEG", exif=exif.tobytes())
    img = media.decode_image(data)
    assert img.size == (photo.height, photo.width)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "empty"),
        (b"hello, I am text", "not an image"),
        (bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)), "not an image"),
    ],
)
def test_not_an_image(data: bytes, match: str) -> None:
    with pytest.raises(jepa.InvalidInputError, match=match):
        media.decode_image(data)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_truncated(photo: Image.Image, fmt: str) -> None:
    data = encoded(photo, fmt)
    with pytest.raises(jepa.InvalidInputError, match="truncated or corrupt image"):
        media.decode_image(data[: len(data) // 2])


def test_decompression_bomb_names_the_cap(photo: Image.Image, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(media, "MAX_PIXELS", 100 * 100)
    with pytest.raises(
        jepa.InvalidInputError, match=r"160x120 = 19200 pixels is over the limit of 10000 pixels"
    ):
        media.decode_image(encoded(photo, "PNG"))
    with pytest.raises(jepa.InvalidInputError, match="10000 pixels"):
        media.decode_image(photo)  # a PIL image too
    monkeypatch.setattr(media, "MAX_PIXELS", 160 * 120)
    assert media.decode_image(encoded(photo, "PNG")).size == (160, 120)


def test_bomb_headers_never_allocate() -> None:
    # Above Pillow's warning limit (its warning must not escape) and above its error limit.
    for side in (10_000, 100_000):
        with pytest.raises(jepa.InvalidInputError, match="decompression bomb"):
            media.decode_image(png_header_only(side, side))


def test_zero_sized() -> None:
    with pytest.raises(jepa.InvalidInputError, match="zero-sized image"):
        media.decode_image(Image.new("RGB", (0, 5)))
    # Pillow does not identify a PNG of width 0: it is a broken PNG, never tried as a video.
    with pytest.raises(jepa.InvalidInputError, match=r"invalid PNG image .*zero-sized"):
        media.decode_image(png_header_only(0, 7))


def test_missing_file_directory_and_wrong_type(tmp_path: Path) -> None:
    with pytest.raises(jepa.InvalidInputError, match="no such file"):
        media.decode_image(tmp_path / "nope.jpg")
    with pytest.raises(jepa.InvalidInputError, match="directory"):
        media.decode_image(tmp_path)
    with pytest.raises(jepa.InvalidInputError, match="cannot decode an image from int"):
        media.decode_image(3)  # type: ignore[arg-type]


def test_errors_are_value_errors_too() -> None:
    with pytest.raises(ValueError):
        media.decode_image(b"nope")


def test_threads_decode_the_same(photo: Image.Image) -> None:
    datas = [encoded(photo.rotate(a), "JPEG") for a in range(0, 40, 5)] * 4
    serial = [np.asarray(media.decode_image(d)) for d in datas]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda d: np.asarray(media.decode_image(d)), datas))
    assert all(np.array_equal(a, b) for a, b in zip(serial, parallel, strict=True))
