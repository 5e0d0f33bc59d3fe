"""Synthetic media for the tests and the soak: random PNGs and MPEG-4 clips made in memory, and a
PNG header that claims any size (a decompression-bomb probe with no pixel data). One copy, imported
by tools/soak.py and by the tests (conftest.import_tool("media_samples"))."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np


def png_bytes(seed: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """A random RGB PNG, width x height."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def video_bytes(n_frames: int = 4, size: tuple[int, int] = (64, 48), seed: int = 7) -> bytes:
    """A tiny MPEG-4 clip of random frames."""
    import av

    buf = io.BytesIO()
    rng = np.random.default_rng(seed)
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=8)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        for _ in range(n_frames):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height and that has no pixel data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")
