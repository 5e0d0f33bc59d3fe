"""jepa.media's bounds (issue 10): only the promised formats decode (no EPS through Ghostscript, no
FFmpeg demuxer outside the containers read here), a cut-short PNG is a broken image, only regular
files are read (a FIFO or a device never blocks nor streams), and a Budget refuses bytes and pixels
before they are read or decoded; a video's frames are preprocessed as they decode."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import EpsImagePlugin, Image
from test_media_decode import png_header_only

import jepa
from jepa import media

from conftest import import_tool


def _png(size: tuple[int, int] = (16, 12)) -> bytes:
    buf = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 256, (size[1], size[0], 3), np.uint8)
    Image.fromarray(pixels).save(buf, "PNG")
    return buf.getvalue()


def _video(n: int, size: tuple[int, int]) -> bytes:
    return import_tool("media_samples").video_bytes(n, size, seed=1)  # one copy (tools/)


class _Info:
    """The ModelInfo fields jepa.media reads, for a 32-pixel image model."""

    image_patch_embed = False

    class preprocess:
        mean, std, rescale, resize_short, crop = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 1 / 255, 32, 32

        class resize_mode:
            name = "SHORTEST_EDGE"

        class resample:
            name = "BILINEAR"

    family, modality, n_frames, tubelet_size = "hfvit", "video", 4, 1


class _Model:
    info = _Info()


def test_eps_is_not_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[object] = []
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", lambda *a, **k: called.append(a))
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nnewpath 0 0 moveto showpage\n%%EOF\n"
    with pytest.raises(jepa.InvalidInputError, match="not an image"):
        media.decode_image(eps)
    with pytest.raises(jepa.InvalidInputError, match="not an image or a video"):
        media.prepare(eps, _Model())
    assert called == []
    assert set(media.IMAGE_FORMATS) == {"PNG", "JPEG", "WEBP", "BMP", "GIF", "TIFF"}


def test_a_cut_short_png_is_a_broken_image_not_a_video() -> None:
    data = _png()
    for n in (33, 40, len(data) // 2):
        with pytest.raises(jepa.InvalidInputError, match=r"truncated or (invalid|corrupt)") as e:
            media.prepare(data[:n], _Model())
        assert "video" not in e.value.message


def test_ffmpeg_opens_only_the_containers_read_here() -> None:
    playlist = b"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nfile:///etc/hostname\n#EXT-X-ENDLIST\n"
    with pytest.raises(jepa.InvalidInputError):
        media.load_video(playlist, 1)
    assert "mov" in media.CONTAINERS and "hls" not in media.CONTAINERS


def _in_thread(fn: object, timeout: float = 10.0) -> BaseException | None:
    """Run fn in a thread; fail (not hang the suite) when it blocks."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()  # type: ignore[operator]
            out.append(None)
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert out, "blocked: the read never returned"
    return out[0]


def test_a_fifo_or_a_device_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    for src in (fifo, Path("/dev/zero")):
        for read in (lambda s=src: media.read_bytes(s), lambda s=src: media.decode_image(s),
                     lambda s=src: media.load_video(s, 1), lambda s=src: media.prepare(str(s), _Model())):
            exc = _in_thread(read)
            assert isinstance(exc, jepa.InvalidInputError) and "not a regular file" in exc.message, exc


def test_os_errors_of_a_path_are_input_errors(tmp_path: Path) -> None:
    for path in ("x" * 5000, str(tmp_path / "a\x00b")):
        with pytest.raises(jepa.InvalidInputError, match="cannot read"):
            media.read_bytes(path)


def test_the_input_size_is_checked_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "sparse.png"
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # 1 GiB, sparse: reading it would cost 1 GiB
    budget = media.Budget(max_input_bytes=1 << 20, names={"max_input_bytes": "--max-input-mb"})
    tracemalloc.start()
    try:
        with pytest.raises(jepa.ResourceLimitError, match=r"at most 1048576 .*--max-input-mb"):
            media.read_bytes(big, budget)
        with pytest.raises(jepa.ResourceLimitError):
            media.prepare(str(big), _Model(), budget=budget)
        assert tracemalloc.get_traced_memory()[1] < 8 << 20
    finally:
        tracemalloc.stop()
    video = _video(2, (32, 32))
    with pytest.raises(jepa.ResourceLimitError, match="the video"):
        media.load_video(video, 1, budget=media.Budget(max_input_bytes=len(video) - 1))


def test_pixels_are_checked_from_the_header() -> None:
    bomb = png_header_only(9000, 9000)  # 81 Mpx, a few dozen bytes
    with pytest.raises(jepa.ResourceLimitError, match=r"9000x9000 .*per image \(--max-image-pixels\)"):
        media.prepare(bomb, _Model(), budget=media.Budget(max_image_pixels=40_000_000,
                                                          names={"max_image_pixels": "--max-image-pixels"}))
    budget = media.Budget(max_request_pixels=16 * 12 * 2)
    media.prepare(_png(), _Model(), budget=budget)
    media.prepare(_png(), _Model(), budget=budget)
    with pytest.raises(jepa.ResourceLimitError, match="per request"):
        media.prepare(_png(), _Model(), budget=budget)
    assert budget.used_pixels == 16 * 12 * 2


def test_a_videos_kept_and_decoded_pixels_are_bounded() -> None:
    video = _video(6, (64, 48))
    with pytest.raises(jepa.ResourceLimitError, match="per request"):  # 4 frames × 64 × 48, from the header
        media.prepare(video, _Model(), budget=media.Budget(max_request_pixels=4 * 64 * 48 - 1))
    with pytest.raises(jepa.ResourceLimitError, match="decodes to more than"):  # 6 frames decoded
        media.prepare(video, _Model(), budget=media.Budget(max_clip_pixels=5 * 64 * 48))
    enough = media.Budget(max_clip_pixels=6 * 64 * 48, max_request_pixels=4 * 64 * 48)
    media.prepare(video, _Model(), budget=enough)


def test_video_frames_are_preprocessed_as_they_decode() -> None:
    """Full-resolution frames are never all held: peak memory stays near one frame, and the result is
    the bits of decoding every frame first."""
    n, size = 8, (1024, 768)
    video = _video(n, size)
    frame_bytes = size[0] * size[1] * 3
    slow = np.stack([media.preprocess_image(Image.fromarray(f), media.recipe_for(_Model()))
                     for f in media.load_video(video, n)], axis=1)
    tracemalloc.start()
    try:
        fast = media.prepare(video, _Model(), frames=n)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * frame_bytes, (peak, frame_bytes)
    np.testing.assert_array_equal(fast.view(np.uint32), slow.view(np.uint32))


# The media fuzzer's find (tests/fuzz/fuzz_media.py): an mp4 whose video stream FFmpeg has no
# decoder for (codec_context None) raised AttributeError from load_video.
_NO_DECODER = "AQAAACBmdHlwaXNvbQAAAgBpc29taXNvMmF2YzFtcDQxAAAACGZyZWUAAAMBbWRhdAAAAp8GBf//m9xF6b3m2Ui3lizYINkj7u94MjY0IC0gY29yZSAxNjUgLSBILjI2NC9NUEVHLTQgQVZDIGNvZGVjIC0gQ29weWxlZnQgMjAwMy0yMDI1IC0gaHR0cDovL3d3dy52aWRlb2xhbi5vcmcveDI2NC5odG1sIC0gb3B0aW9uczogY2FiYWM9MSByZWY9MyBkZWJsb2NrPTE6MDowIGFuYWx5c2U9MHgzOjB4MTEzIG1lPWhleCBzdWJtZT03IHBzeT0xIHBzeV9yZD0xLjAwOjAuMDAgbWl4ZWRfcmVmPTEgbWVfcmFuZ2U9MTYgY2hyb21hX21lPTEgdHJlbGxpcz0xIDh4OGRjdD0xIGNxbT0wIGRlYWR6b25lPTIxLDExIGZhc3RfcHNraXA9MSBjaHJvbWFfcXBfb2Zmc2V0PS0yIHRocmVhZHM9MSBsb29rYWhlYWRfdGhyZWFkcz0xIHNsaWNlZF90aHJlYWRzPTAgbnI9MCBkZWNpbWF0ZT0xIGludGVybGFjZWQ9MCBibHVyYXlfY29tcGF0PTAgY29uc3RyYWluZWRfaW50cmE9MCBiZnJhbWVzPTMgYl9weXJhbWlkPTIgYl9hZGFwdD0xIGJfYmlhcz0wIGRpcmVjdD0xIHdlaWdodGI9MSBvcGVuX2dvcD0wIHdlaWdodHA9MiBrZXlpbnQ9MjUwIGtleWludF9taW49NCBzY2VuZWN1dD00MCBpbnRyYV9yZWZyZXNoPTAgcmNfbG9va2FoZWFkPTQwIHJjPWNyZiBtYnRyZWU9MSBjcmY9MjMuMCBxY29tcD0wLjYwIHFwbWluPTAgcXBtYXg9NjkgcXBzdGVwPTQgaXBfcmF0aW89MS40MCBhcT0xOjEuMDAAgAAAAA9liIQAEP/+94G/MstkP7kAAAARQZohbEEf1n/+cgP/wla1h4AAAAAUQZpCPCGTKYQQ/9Hb/lAn/+IRnQcAAAASQZpjSeEPJlMCCH/T8neBSew8AAADQG1vb3YAAABsbXZoZAAAAAAAAAAAAAAAAAAAA+gAAAPoAAEAAAEAAAAAAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAIAAAJqdHJhawAAAFx0a2hkAAAAAwAAAAAAAAAAAAAAAQAAAAAAAAPoAAAAAAAAAAAAAAAAAAAAAAABAAAAAAAAAPoAAAAAAAAAAQAAAAAAAAAAAAAAAAAAQAAAAAAQAAAAEAAAAAAAJGVkdHMAAAAcZWxzdAAAAAAAAAABAAAD6AAAIAAAAQAAAAAB4m1kaWEAAAAgbWRoZAAAAAAAAAAAAAAAAAAAQAAAAEAAVcQAAAAAAC1oZGxyAAAAAAAAAAB2aWRlAAAAAAAAAAAAAAAAVmlkZW9IYW5kbGVyAAAAAY1taW5mAAAAFHZtaGQAAAABAAAAAAAAAAAAAAAkZGluZgAAABxkcmVmAAAAAAAAAAEAAAAMdXJsIAAAAAEAAAFNc3RibAAAAK1zdHNkAAAAAAAAAAEAAACdYXZjMAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAQABAASAAAAEgAAAAAAAAAAf//////////AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAGP//AAAAM2F2Y0MBZAAK/+EAFmdkAAqs2V6EAAADAAQAAAMAIDxIllgBAAZo6+PLIsD9+PgAAAAAFGJ0cnQAAAAAAAAXyAAAAAAAAAAYc3R0cwAAAAAAAAABAAAABAAAEAAAAAAUc3RzcwAAAAAAAAABAAAAAQAAABhjdHRzAAAAAAAAAAEAAAAEAAAgAAAAABxzdHNjAAAAAAAAAAEAAAABAAAABAAAAAEAAAAkc3RzegAAAAAAAAAAAAAABAAAArYAAAAVAAAAGAAAABYAAAAUc3RjbwAAAAAAAAABAAAAMAAAAGJ1ZHRhAAAAWm1ldGEAAAAAAAAAIWhkbHIAAAAAAAAAAG1kaXJhcHBsAAAAAAAAAAAAAAAALWlsc3QAAAAlqXRvbQAAAB1kYXRhAAAAAQAAAABMYXZmNjIuMTIuMTAy"  # noqa: E501


def test_a_video_stream_without_a_decoder_is_an_input_error() -> None:
    data = base64.b64decode(_NO_DECODER)[1:]  # the fuzzer's first byte picks the mode
    for as_video in (None, True):
        with pytest.raises(jepa.InvalidInputError):
            media.prepare(data, _Model(), as_video=as_video, budget=media.Budget(max_request_pixels=1 << 30))


# Another find of the media fuzzer: an mp4 whose metadata is not UTF-8 raised UnicodeDecodeError
# from PyAV's container open.
_BAD_METADATA = "AQAAACBmdHlwaXNvbQAAAgBpc29taXNvMmF2YzFtcDQxAAAACGZyZWUAAAMBbWRhdAAAAp8GBf//m9xF6b3m2Ui3lizYINkj7u94MjY0IC0gY29yZSAxNjUgLSBILjI2NC9NUEVHLTQgQVZDIGNvZGVjIC0gQ29weWxlZnQgMjAwMy0yMDI1IC0gaHR0cDovL3d3dy52aWRlb2xhbi5vcmcveDI2NC5odG1sIC0gb3B0aW9uczogY2FiYWM9MSByZWY9MyBkZWJsb2NrPTE6MDowIGFuYWx5c2U9MHgzOjB4MTEzIG1lPWhleCBzdWJtZT03IHBzeT0xIHBzeV9yZD0xLjAwOjAuMDAgbWl4ZWRfcmVmPTEgbWVfcmFuZ2U9MTYgY2hyb21hX21lPTEgdHJlbGxpcz0xIDh4OGRjdD0xIGNxbT0wIGRlYWR6b25lPTIxLDExIGZhc3RfcHNraXA9MSBjaHJvbWFfcXBfb2Zmc2V0PS0yIHRocmVhZHM9MSBsb29rYWhlYWRfdGhyZWFkcz0xIHNsaWNlZF90aHJlYWRzPTAgbnI9MCBkZWNpbWF0ZT0xIGludGVybGFjZWQ9MCBibHVyYXlfY29tcGF0PTAgY29uc3RyYWluZWRfaW50cmE9MCBiZnJhbWVzPTMgYl9weXJhbWlkPTIgYl9hZGFwdD0xIGJfYmlhcz0wIGRpcmVjdD0xIHdlaWdodGI9MSBvcGVuX2dvcD0wIHdlaWdodHA9MiBrZXlpbnQ9MjUwIGtleWludF9taW49NCBzY2VuZWN1dD00MCBpbnRyYV9yZWZyZXNoPTAgcmNfbG9va2FoZWFkPTQwIHJjPWNyZiBtYnRyZWU9MSBjcmY9MjMuMCBxY29tcD0wLjYwIHFwbWluPTAgcXBtYXg9NjkgcXBzdGVwPTQgaXBfcmF0aW89MS40MCBhcT0xOjEuMDAAgAAAAA9liIQAEP/+94G/MstkP7kAAAARQZohbEEf1n/+cgP/wla1h4AAAAAUQZpCPCGTKYQQ/9Hb/lAn/+IRnQcAAAASQZpjSeEPJlMCCH/T8neBSew8AAADQG1vb3YAAABsbXZoZAAAAAAAAAAAAAAAAAAAA+gAAAPoAAEAAAEAAAAAAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAIAAAJqdHJhawAAAFx0a2hkAAAAAwAAAAAAAAAAAAAAAQAAAAAAAAPoAAAAAAAAAAAAAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAQAAAAAAQAAAAEAAAAAAAJGVkdHMAAAAcZWxzdAAAAAAAAAABAAAD6AAAIAAAAQAAAAAB4m1kaWEAAAAgbWRoZAAAAAAAAAAAAAAAAAAAQAAAAEAAVcQAAAAAAC1oZGxyAAAAAAAAAAB2aWRlAAAAAAAAAAAAAAAAVmlkZedvSGFuZGxlcgAAAAGNbWluZgAAABR2bWhkAAAAAQAAAAAAAAAAAAAAJGRpbmYAAAAcZHJlZgAAAAAAAAABAAAADHVybCAAAAABAAABTXN0YmwAAACtc3RzZAAAAAAAAAABAAAAnWF2YzEAAAAAAAAAAQAAAAAAAAAAAAAAAAAAAAAAEAAQAEgAAABIAAAAAAAAAAEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAY//8AAAAzYXZjQwFkAAr/4QAWZ2QACqzZXoQAAAMABAAAAwAgPEiWWAEABmjr48siwP34+AAAAAAUYnRydAAAAAAAABfIAAAAAAAAABhzdHRzAAAAAAAAAAEAAAAEAAAQAAAAABRzdHNzAAAAAAAAAAEAAAABAAAAGGN0dHMAAAAAAAAAAQAAAAQAACAAAAAAHHN0c2MAAAAAAAAAAQAAAAEAAAAEAAAAAQAAACRzdHN6AAAAAAAAAAAAAAAEAAACtgAAABUAAAAYAAAAFgAAABRzdGNvAAAAAAAAAAEAAAAwAAAAYnVkdGEAAABabWV0YQAAAAAAAAAhaGRscgAAAAAAAAAAAAAAAABtZGlyYXBwbAAAAAAAAAAAAAAAAC1pbHN0AAAAJal0b28AAAAdZGF0YQAAAAEAAAAATGF2ZjYyLjEyLjEwMg=="  # noqa: E501


def test_container_metadata_that_is_not_utf8_is_no_error() -> None:
    data = base64.b64decode(_BAD_METADATA)[1:]
    with contextlib.suppress(jepa.JepaError):  # refusing the file is fine; a UnicodeDecodeError is not
        media.prepare(data, _Model(), as_video=True)
