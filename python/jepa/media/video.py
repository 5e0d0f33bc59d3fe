"""Video files to frames through PyAV: n frames sampled evenly over the whole video.

The frames kept are round(linspace(0, total - 1, n)) with numpy's round-half-to-even, so a clip
shorter than n repeats frames. `total` is the number of frames that actually decode: the container's
count is used as a first guess and checked, and a second pass runs when it was wrong (or absent)."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from typing import IO, TypeAlias

import av
import numpy as np

from ..errors import InvalidInputError
from .decode import check_pixels

VideoSource: TypeAlias = str | os.PathLike[str] | bytes | bytearray | memoryview

# Extensions a directory walk treats as videos (any file given by name is sniffed by content).
VIDEO_EXTENSIONS = frozenset(
    {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".ogv", ".ts"}
)


class NotAVideoError(InvalidInputError):
    """FFmpeg cannot open the data as a video with a video stream; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"not a video: {reason}")
        self.reason = reason


def _reason(e: av.FFmpegError) -> str:
    return str(e.strerror or e)


def sample_indices(total: int, n: int) -> np.ndarray:
    """Indices of n frames spread evenly over total frames (round half to even, as numpy rounds)."""
    if total < 1 or n < 1:
        raise InvalidInputError(f"cannot sample {n} frames from a video of {total} frames")
    return np.round(np.linspace(0, total - 1, n)).astype(np.int64)


def _opener(src: VideoSource) -> Callable[[], IO[bytes]]:
    if isinstance(src, bytes | bytearray | memoryview):
        if len(src) == 0:
            raise NotAVideoError("the data is empty")
        data = bytes(src)
        return lambda: io.BytesIO(data)
    if isinstance(src, str | os.PathLike):
        path = os.fspath(src)
        if not os.path.isfile(path):
            what = "is a directory, not a file" if os.path.isdir(path) else "no such file"
            raise InvalidInputError(f"{what}: {path!r}")
        # A file object, never the name: FFmpeg would read a name as a URL or protocol ("concat:", "http:").
        return lambda: open(path, "rb")
    raise InvalidInputError(f"cannot decode a video from {type(src).__name__}")


def _collect(
    open_file: Callable[[], IO[bytes]], wanted: Sequence[int] | None
) -> tuple[dict[int, np.ndarray], int]:
    """One decoding pass: the frames at `wanted` as RGB uint8, and the number of frames decoded."""
    keep = set(wanted or ())
    frames: dict[int, np.ndarray] = {}
    with open_file() as f:
        try:
            container = av.open(f, mode="r")
        except av.FFmpegError as e:
            raise NotAVideoError(f"FFmpeg cannot read it: {_reason(e)}") from None
        with container:
            if not container.streams.video:
                raise NotAVideoError("the file has no video stream")
            stream = container.streams.video[0]
            check_pixels(stream.codec_context.width, stream.codec_context.height, "video frame")
            n = 0
            try:
                for frame in container.decode(stream):
                    if n in keep:
                        check_pixels(frame.width, frame.height, "video frame")
                        frames[n] = np.ascontiguousarray(frame.to_ndarray(format="rgb24"))
                    n += 1
            except av.FFmpegError as e:
                raise InvalidInputError(f"corrupt or unsupported video: {_reason(e)}") from None
    return frames, n


def _frame_count_hint(open_file: Callable[[], IO[bytes]]) -> int:
    with open_file() as f:
        try:
            with av.open(f, mode="r") as container:
                return int(container.streams.video[0].frames) if container.streams.video else 0
        except av.FFmpegError as e:
            raise NotAVideoError(f"FFmpeg cannot read it: {_reason(e)}") from None


def load_video(src: VideoSource, n_frames: int) -> list[np.ndarray]:
    """A video file (path or bytes) -> n_frames RGB uint8 [H, W, 3] frames, evenly sampled (a frame
    picked twice is the same array twice)."""
    if int(n_frames) < 1:
        raise InvalidInputError(f"n_frames must be at least 1, got {n_frames}")
    open_file = _opener(src)
    hint = _frame_count_hint(open_file)
    indices = sample_indices(hint, n_frames) if hint > 0 else None
    frames, total = _collect(open_file, None if indices is None else indices.tolist())
    if total == 0:
        raise InvalidInputError("the video has no decodable frames")
    if indices is None or total != hint:
        # The container's count was absent or wrong: sample from the frames that really decode.
        indices = sample_indices(total, n_frames)
        frames, again = _collect(open_file, indices.tolist())
        if again != total:
            raise InvalidInputError(f"the video decodes to {total} frames, then {again}: corrupt data")
    return [frames[int(i)] for i in indices]
