"""Image decoding: a file, bytes or a PIL image to an RGB PIL image, converted the way transformers does.

Files and bytes are opened like `transformers.image_utils.load_image` (EXIF orientation applied), then
converted like `transformers.image_transforms.convert_to_rgb`: anything with an alpha band or a
transparency key is composited onto white, everything else goes through Pillow's `convert("RGB")`
(16-bit grey is clipped to 0..255 there, as upstream does). Every failure is a `jepa.InvalidInputError`
with a specific message; no Pillow warning escapes."""

from __future__ import annotations

import io
import os
import re
import stat
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeAlias

from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from ..errors import InvalidInputError
from .budget import Budget

ImageSource: TypeAlias = str | os.PathLike[str] | bytes | bytearray | memoryview | Image.Image

# Extensions a directory walk treats as images (any file given by name is sniffed by content).
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
# The only formats Pillow may decode: those the docs promise (JPEG includes a camera's multi-picture
# MPO). Anything else (EPS, which shells out to Ghostscript, and Pillow's many rarely used
# decoders) is not an image here.
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "BMP", "GIF", "TIFF")
# Signatures of those formats: data that starts with one is an image, so a file Pillow cannot open
# is a broken image (not something to try as a video).
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)

# Only header and metadata parsing runs under this lock, so serialising it costs little; it makes the
# scoped warning filters safe against our own threads (warnings.catch_warnings is process-global
# before Python 3.14). Pixel decoding runs outside it, in parallel (Pillow releases the GIL).
_LOCK = threading.Lock()


class NotAnImageError(InvalidInputError):
    """Pillow cannot identify the data as an image (prepare() then tries it as a video)."""


def max_pixels() -> int:
    # Read at call time so that `jepa.media.MAX_PIXELS = n` takes effect.
    from . import MAX_PIXELS

    return int(MAX_PIXELS)


def check_pixels(width: int, height: int, what: str = "image") -> None:
    """Refuse a zero-sized image or one over jepa.media.MAX_PIXELS."""
    if width <= 0 or height <= 0:
        raise InvalidInputError(f"zero-sized {what} ({width}x{height})")
    cap = max_pixels()
    if width * height > cap:
        raise InvalidInputError(
            f"{what} of {width}x{height} = {width * height} pixels is over the limit of {cap} pixels "
            "(jepa.media.MAX_PIXELS), refused as a possible decompression bomb"
        )


def _signature(data: bytes | bytearray | memoryview) -> str | None:
    head = bytes(data[:12])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    return next((name for magic, name in _SIGNATURES if head.startswith(magic)), None)


def open_regular(src: str | os.PathLike[str]) -> tuple[io.FileIO, int]:
    """Open a path for reading only if it is a regular file: (the open file, its size).

    The path is opened with O_NONBLOCK, so a FIFO or a device cannot block the open, and checked with
    fstat on the open descriptor (no race with a rename) before a byte is read: a FIFO, a device, a
    socket or a directory is refused with an InvalidInputError, as is a path the OS refuses
    (ENAMETOOLONG, EACCES, ELOOP, ...)."""
    path = os.fspath(src)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InvalidInputError(f"no such file: {path!r}") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InvalidInputError(f"cannot read {path[:200]!r}: {reason}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InvalidInputError(f"is a directory, not a file: {path!r}")
        if not stat.S_ISREG(st.st_mode):
            raise InvalidInputError(f"not a regular file (a FIFO, a device or a socket): {path!r}")
        return io.FileIO(fd, "rb", closefd=True), st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_bytes(src: str | os.PathLike[str], budget: Budget | None = None) -> bytes:
    """A regular file's bytes (open_regular's checks), its size checked against the budget's
    max_input_bytes before it is read; a missing or unreadable file is an InvalidInputError."""
    f, size = open_regular(src)
    with f:
        limit = None
        if budget is not None:
            budget.check_bytes(size, "the file")
            limit = budget.max_input_bytes
        try:
            # Never more than the budget, even when the file grows after fstat.
            data = f.read(size + 1 if limit is None else limit + 1)
            if limit is None and len(data) > size:
                data += f.read()
        except OSError as e:
            raise InvalidInputError(f"cannot read {os.fspath(src)!r}: {e.strerror or e}") from None
    if budget is not None:
        budget.check_bytes(len(data), "the file")
    return data


@contextmanager
def _pillow_quiet() -> Iterator[None]:
    """Pillow calls that parse headers or metadata, with its warnings kept in (serialised: see _LOCK)."""
    with _LOCK, warnings.catch_warnings():
        # Pillow's bomb warning is replaced by our own size check; its other warnings (odd EXIF or
        # TIFF metadata) say nothing a caller could act on.
        warnings.filterwarnings("ignore", module=r"PIL(\.|$)")
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


def _open(data: bytes | bytearray | memoryview) -> Image.Image:
    """Open the data (the header only: pixels decode later, outside the lock), in IMAGE_FORMATS only."""
    if len(data) == 0:
        raise NotAnImageError("not an image: the data is empty")
    with _pillow_quiet():
        try:
            return Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)
        except UnidentifiedImageError:
            kind = _signature(data)
            if kind is not None:
                raise InvalidInputError(
                    f"truncated or invalid {kind} image ({len(data)} bytes): Pillow cannot read its header "
                    "(cut short, zero-sized or broken)"
                ) from None
            raise NotAnImageError(
                "not an image: Pillow cannot identify it "
                "(an unknown format, or a broken or zero-sized header)"
            ) from None
        except Image.DecompressionBombError as e:
            # Pillow refuses past twice its MAX_IMAGE_PIXELS at open, before our own checks see the
            # size: its message gives the pixel count, which our checks then judge (a budget's 413).
            m = re.search(r"\((\d+) pixels\)", str(e))
            raise _TooManyPixels(int(m.group(1)) if m else None, str(e)) from None
        except Exception as e:  # a broken header: SyntaxError, struct.error, OSError, ...
            raise InvalidInputError(f"corrupt image header: {e}") from None


class _TooManyPixels(Exception):
    """Pillow's decompression-bomb refusal at open, with the header's pixel count where it said it."""

    def __init__(self, pixels: int | None, message: str) -> None:
        super().__init__(message)
        self.pixels = pixels


def _open_checked(data: bytes | bytearray | memoryview, budget: Budget | None) -> Image.Image:
    """_open, with an image Pillow refuses for its size judged by the budget (ResourceLimitError, a
    413 in the server) and else by jepa.media.MAX_PIXELS, as a smaller image over them is."""
    try:
        return _open(data)
    except _TooManyPixels as e:
        if e.pixels is not None and budget is not None:
            budget.check_image_pixels(e.pixels, f"image of {e.pixels} pixels")
        raise InvalidInputError(
            f"image of {e.pixels if e.pixels is not None else 'too many'} pixels is over the limit of "
            f"{max_pixels()} pixels (jepa.media.MAX_PIXELS), refused as a possible decompression bomb"
        ) from None


def _orientation(img: Image.Image) -> int:
    # After load(): a PNG's EXIF chunk may follow its pixel data.
    with _pillow_quiet():
        return int(img.getexif().get(ExifTags.Base.Orientation, 1))


def to_rgb(img: Image.Image) -> Image.Image:
    """transformers' convert_to_rgb on a PIL image: alpha is composited onto white."""
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return img if img.mode == "RGB" else img.convert("RGB")


def decode_image(src: ImageSource, budget: Budget | None = None) -> Image.Image:
    """A path, bytes or PIL image -> an RGB PIL image (a GIF or animated WebP gives its first frame).
    With a budget, the header's size is checked against it (and counted) before pixels decode."""
    if isinstance(src, Image.Image):
        img, from_file = src, False
    elif isinstance(src, bytes | bytearray | memoryview):
        img, from_file = _open_checked(src, budget), True
    elif isinstance(src, str | os.PathLike):
        img, from_file = _open_checked(read_bytes(src, budget), budget), True
    else:
        raise InvalidInputError(f"cannot decode an image from {type(src).__name__}")
    if budget is not None:  # the caller's limit first: over it is its 413, whatever else it is over
        budget.check_image(*img.size)
    check_pixels(*img.size)
    if budget is not None:
        budget.charge(img.size[0] * img.size[1], "an image")
    try:
        img.load()
        # Files are turned upright like transformers' load_image does; a PIL image given by the
        # caller is taken as it is (the processors apply no EXIF rotation to it).
        if from_file and _orientation(img) != 1:
            img = ImageOps.exif_transpose(img)
        rgb = to_rgb(img)
    except InvalidInputError:
        raise
    except Image.DecompressionBombError as e:
        raise InvalidInputError(f"image refused as a possible decompression bomb: {e}") from None
    except Exception as e:  # truncated or corrupt pixel data: OSError, SyntaxError, ValueError, ...
        raise InvalidInputError(f"truncated or corrupt image: {e}") from None
    return rgb
