"""jepa.media.load_video: frame sampling, short clips, containers without a frame count, bad files.

The videos are written by the test with PyAV: each frame a solid grey level, so a decoded frame tells
which source frame it was."""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest

import jepa
from jepa import media
from jepa.media import video

LEVELS = [10 + 24 * i for i in range(10)]  # frame i is grey LEVELS[i]


def write_video(
    dst: str | Path | io.BytesIO, n: int, fmt: str = "mp4", size: tuple[int, int] = (64, 48)
) -> None:
    container = av.open(dst, mode="w", format=fmt)
    stream = container.add_stream("libx264", rate=10)
    stream.width, stream.height = size
    stream.pix_fmt = "yuv420p"
    stream.options = {"qp": "0"}
    for i in range(n):
        pixels = np.full((size[1], size[0], 3), LEVELS[i], np.uint8)
        for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)
    container.close()


def video_bytes(n: int, fmt: str = "mp4", **kw: object) -> bytes:
    buf = io.BytesIO()
    write_video(buf, n, fmt, **kw)  # type: ignore[arg-type]
    return buf.getvalue()


def which(frames: list[np.ndarray]) -> list[int]:
    """The source frame index of each decoded frame (nearest grey level)."""
    return [int(np.argmin([abs(float(f.mean()) - lv) for lv in LEVELS])) for f in frames]


@pytest.mark.parametrize(
    ("total", "n", "expected"),
    [
        (10, 4, [0, 3, 6, 9]),
        (10, 5, [0, 2, 4, 7, 9]),  # 4.5 rounds to 4: half to even, as numpy rounds
        (6, 3, [0, 2, 5]),  # 2.5 -> 2
        (4, 3, [0, 2, 3]),  # 1.5 -> 2
        (3, 8, [0, 0, 1, 1, 1, 1, 2, 2]),  # a short clip repeats frames
        (1, 3, [0, 0, 0]),
        (7, 1, [0]),
    ],
)
def test_sample_indices(total: int, n: int, expected: list[int]) -> None:
    assert media.sample_indices(total, n).tolist() == expected


def test_sample_indices_refuses_nothing() -> None:
    with pytest.raises(jepa.InvalidInputError):
        media.sample_indices(0, 4)
    with pytest.raises(jepa.InvalidInputError):
        media.sample_indices(5, 0)


@pytest.mark.parametrize(("n", "expected"), [(4, [0, 3, 6, 9]), (5, [0, 2, 4, 7, 9]), (10, list(range(10)))])
def test_mp4_frames_are_sampled_evenly(tmp_path: Path, n: int, expected: list[int]) -> None:
    path = tmp_path / "ten.mp4"
    write_video(path, 10)
    frames = media.load_video(path, n)
    assert len(frames) == n
    assert all(f.dtype == np.uint8 and f.shape == (48, 64, 3) and f.flags.c_contiguous for f in frames)
    assert which(frames) == expected


def test_short_clip_repeats_frames() -> None:
    assert which(media.load_video(video_bytes(3), 8)) == [0, 0, 1, 1, 1, 1, 2, 2]


def test_path_and_bytes_agree(tmp_path: Path) -> None:
    path = tmp_path / "v.mp4"
    write_video(path, 10)
    for a, b in zip(media.load_video(str(path), 6), media.load_video(path.read_bytes(), 6), strict=True):
        assert np.array_equal(a, b)


def test_container_without_a_frame_count() -> None:
    data = video_bytes(10, fmt="matroska")
    with av.open(io.BytesIO(data)) as c:
        assert c.streams.video[0].frames == 0  # so the frames are counted by decoding
    assert which(media.load_video(data, 5)) == [0, 2, 4, 7, 9]


def test_a_wrong_frame_count_is_corrected(monkeypatch: pytest.MonkeyPatch) -> None:
    data = video_bytes(10)
    monkeypatch.setattr(video, "_frame_count_hint", lambda open_file: 7)
    assert which(media.load_video(data, 5)) == [0, 2, 4, 7, 9]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "not a video: the data is empty"),
        (b"definitely not a video" * 50, "not a video: FFmpeg cannot read it"),
    ],
)
def test_not_a_video(data: bytes, match: str) -> None:
    with pytest.raises(jepa.InvalidInputError, match=match):
        media.load_video(data, 4)


def test_truncated_video() -> None:
    data = video_bytes(10)
    with pytest.raises(jepa.InvalidInputError, match="video"):
        media.load_video(data[: len(data) // 2], 4)


def test_audio_only_file_has_no_video_stream() -> None:
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="wav") as c:
        stream = c.add_stream("pcm_s16le", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
        frame.sample_rate = 8000
        for packet in stream.encode(frame):
            c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)
    with pytest.raises(jepa.InvalidInputError, match="no video stream"):
        media.load_video(buf.getvalue(), 4)


def test_frame_size_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(media, "MAX_PIXELS", 1000)
    with pytest.raises(
        jepa.InvalidInputError, match="video frame of 64x48 = 3072 pixels is over the limit of 1000"
    ):
        media.load_video(video_bytes(2), 2)


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(jepa.InvalidInputError, match="no such file"):
        media.load_video(tmp_path / "missing.mp4", 4)
    with pytest.raises(jepa.InvalidInputError, match="directory"):
        media.load_video(tmp_path, 4)
    with pytest.raises(jepa.InvalidInputError, match="n_frames"):
        media.load_video(video_bytes(2), 0)
    with pytest.raises(jepa.InvalidInputError, match="cannot decode a video from list"):
        media.load_video([], 2)  # type: ignore[arg-type]


def test_a_name_is_never_read_as_a_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(jepa.InvalidInputError, match="no such file"):
        media.load_video("http://127.0.0.1:9/x.mp4", 2)
