"""Video files to frames through PyAV: n frames sampled evenly over the whole video.

The frames kept are round(linspace(0, total - 1, n)) with numpy's round-half-to-even, so a clip
shorter than n repeats frames. `total` is the number of frames that actually decode: the container's
count is used as a first guess and checked, and a second pass runs when it was wrong (or absent)."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from typing import IO, Any, TypeAlias

import av
import numpy as np

from ..errors import InvalidInputError
from .budget import Budget, ClipCounter
from .decode import check_pixels, open_regular

VideoSource: TypeAlias = str | os.PathLike[str] | bytes | bytearray | memoryview

# Extensions a directory walk treats as videos (any file given by name is sniffed by content).
VIDEO_EXTENSIONS = frozenset(
    {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".ogv", ".ts"}
)
# The only FFmpeg demuxers that may open an input: the containers of VIDEO_EXTENSIONS, and GIF (an
# animated GIF read as a clip). FFmpeg probes content, and without this list it would open any of
# its hundreds of formats (playlists that name other files among them).
CONTAINERS = ("mov", "matroska", "avi", "mpeg", "mpegts", "ogg", "gif")
_OPEN_OPTIONS = {"format_whitelist": ",".join(CONTAINERS)}


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


def _opener(src: VideoSource, budget: Budget | None) -> Callable[[], IO[bytes]]:
    if isinstance(src, bytes | bytearray | memoryview):
        if len(src) == 0:
            raise NotAVideoError("the data is empty")
        if budget is not None:
            budget.check_bytes(len(src), "the video")
        data = bytes(src)
        return lambda: io.BytesIO(data)
    if isinstance(src, str | os.PathLike):
        path = os.fspath(src)
        f, size = open_regular(path)  # only a regular file; checked before FFmpeg sees a byte
        f.close()
        if budget is not None:
            budget.check_bytes(size, "the video")

        # A file object, never the name: FFmpeg would read a name as a URL or protocol ("concat:", "http:").
        def reopen() -> IO[bytes]:
            return open_regular(path)[0]

        return reopen
    raise InvalidInputError(f"cannot decode a video from {type(src).__name__}")


def _codec(stream: Any) -> Any:
    """The stream's decoder; a stream FFmpeg has no decoder for has none (codec_context is None)."""
    if stream.codec_context is None:
        raise InvalidInputError("corrupt or unsupported video: no decoder for its video stream")
    return stream.codec_context


def _open_container(f: IO[bytes]) -> Any:
    try:
        # A container's metadata is not ours to read: bytes that are not UTF-8 must not fail it.
        return av.open(f, mode="r", options=_OPEN_OPTIONS, metadata_errors="replace")
    except av.ArgumentError:
        # FFmpeg probed a format that is not in CONTAINERS (an audio file, a playlist, ...).
        raise NotAVideoError(
            "no video stream in a container read here (mp4/mov, mkv/webm, avi, mpeg, ts, ogg, gif)"
        ) from None
    except av.FFmpegError as e:
        raise NotAVideoError(f"FFmpeg cannot read it: {_reason(e)}") from None


Transform = Callable[[np.ndarray], Any]


def _collect(
    open_file: Callable[[], IO[bytes]],
    wanted: Sequence[int] | None,
    transform: Transform | None,
    counter: ClipCounter | None,
) -> tuple[dict[int, Any], int]:
    """One decoding pass: the frames at `wanted` (RGB uint8, through `transform` when given, one
    frame at a time), and the number of frames decoded."""
    keep = set(wanted or ())
    frames: dict[int, Any] = {}
    with open_file() as f, _open_container(f) as container:
        if not container.streams.video:
            raise NotAVideoError("the file has no video stream")
        stream = container.streams.video[0]
        ctx = _codec(stream)
        check_pixels(ctx.width, ctx.height, "video frame")
        if counter is not None:
            counter.budget.check_image(ctx.width, ctx.height, "a video frame")
        n = 0
        try:
            for frame in container.decode(stream):
                if counter is not None:
                    counter.frame(frame.width, frame.height)
                if n in keep:
                    check_pixels(frame.width, frame.height, "video frame")
                    rgb = np.ascontiguousarray(frame.to_ndarray(format="rgb24"))
                    # Transformed at once: full-resolution frames are never all held.
                    frames[n] = rgb if transform is None else transform(rgb)
                n += 1
        except av.FFmpegError as e:
            raise InvalidInputError(f"corrupt or unsupported video: {_reason(e)}") from None
    return frames, n


def _frame_count_hint(open_file: Callable[[], IO[bytes]]) -> int:
    with open_file() as f, _open_container(f) as container:
        return int(container.streams.video[0].frames) if container.streams.video else 0


def _frame_size(open_file: Callable[[], IO[bytes]]) -> tuple[int, int]:
    """(width, height) of the first video stream, from the header; (0, 0) without one."""
    with open_file() as f, _open_container(f) as container:
        if not container.streams.video:
            return 0, 0
        ctx = _codec(container.streams.video[0])
        return int(ctx.width), int(ctx.height)


def load_video(
    src: VideoSource, n_frames: int, *, budget: Budget | None = None, transform: Transform | None = None
) -> list[Any]:
    """A video file (path or bytes) -> n_frames RGB uint8 [H, W, 3] frames, evenly sampled (a frame
    picked twice is the same array twice).

    transform: applied to each kept frame as soon as it is decoded (what is returned instead of the
    frame), so a caller that resizes holds one full-resolution frame at a time. budget: the file's
    size, the frame size and the n_frames kept are checked from the header before decoding, and every
    decoded frame counts against the clip's limit."""
    if int(n_frames) < 1:
        raise InvalidInputError(f"n_frames must be at least 1, got {n_frames}")
    open_file = _opener(src, budget)
    hint = _frame_count_hint(open_file)
    counter = None
    if budget is not None:
        width, height = _frame_size(open_file)
        budget.check_image(width, height, "a video frame")
        budget.charge(int(n_frames) * width * height, f"{n_frames} video frames of {width}x{height}")
        counter = budget.clip_counter()
    indices = sample_indices(hint, n_frames) if hint > 0 else None
    frames, total = _collect(open_file, None if indices is None else indices.tolist(), transform, counter)
    if total == 0:
        raise InvalidInputError("the video has no decodable frames")
    if indices is None or total != hint:
        # The container's count was absent or wrong: sample from the frames that really decode.
        indices = sample_indices(total, n_frames)
        frames, again = _collect(open_file, indices.tolist(), transform, counter)
        if again != total:
            raise InvalidInputError(f"the video decodes to {total} frames, then {again}: corrupt data")
    return [frames[int(i)] for i in indices]
