"""What one caller may make the media pipeline read and decode, checked before the cost is paid.

A `Budget` is optional everywhere (None: only jepa.media.MAX_PIXELS applies). The server builds one
per request from its settings, so a request is bounded in bytes read per input, pixels per image or
frame (from the header, before any pixel is decoded), pixels decoded per clip (every frame the
decoder produces, kept or not) and pixels kept per request (images and sampled frames together).
A refusal is a ResourceLimitError naming the limit; the items of a request are prepared in
parallel, so the counters are guarded by a lock."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ResourceLimitError


@dataclass
class Budget:
    max_input_bytes: int | None = None  # bytes read from one input file
    max_image_pixels: int | None = None  # width × height of one image or video frame
    max_clip_pixels: int | None = None  # pixels the decoder produces for one video (every frame)
    max_request_pixels: int | None = None  # pixels kept over every image and sampled frame
    # How a refusal names each limit (the server's flags); default: the field's name.
    names: Mapping[str, str] = field(default_factory=dict)
    used_pixels: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _name(self, limit: str) -> str:
        return self.names.get(limit, limit)

    def check_bytes(self, size: int, what: str) -> None:
        """Refuse an input of `size` bytes over max_input_bytes, before it is read."""
        cap = self.max_input_bytes
        if cap is not None and size > cap:
            raise ResourceLimitError(
                f"{what} is {size} bytes; at most {cap} are read per input ({self._name('max_input_bytes')})"
            )

    def check_image(self, width: int, height: int, what: str = "image") -> None:
        """Refuse one image or frame over max_image_pixels (from its header)."""
        self.check_image_pixels(width * height, f"{what} of {width}x{height} = {width * height} pixels")

    def check_image_pixels(self, pixels: int, what: str) -> None:
        """Refuse an image of `pixels` pixels (`what` says which, and how big) over max_image_pixels."""
        cap = self.max_image_pixels
        if cap is not None and pixels > cap:
            raise ResourceLimitError(
                f"{what} is over the limit of {cap} pixels per image ({self._name('max_image_pixels')})"
            )

    def charge(self, pixels: int, what: str) -> None:
        """Count `pixels` kept against max_request_pixels, refusing before the limit is passed."""
        with self._lock:
            total = self.used_pixels + pixels
            cap = self.max_request_pixels
            if cap is not None and total > cap:
                raise ResourceLimitError(
                    f"{what}: {pixels} more pixels would make {total}, over the limit of {cap} decoded "
                    f"pixels per request ({self._name('max_request_pixels')})"
                )
            self.used_pixels = total

    def clip_counter(self) -> ClipCounter:
        return ClipCounter(self)


@dataclass
class ClipCounter:
    """Pixels one video's decoder has produced so far (both passes of load_video)."""

    budget: Budget
    decoded: int = 0

    def frame(self, width: int, height: int) -> None:
        self.decoded += width * height
        cap = self.budget.max_clip_pixels
        if cap is not None and self.decoded > cap:
            raise ResourceLimitError(
                f"the video decodes to more than {cap} pixels (frames × width × height; "
                f"{self.budget._name('max_clip_pixels')})"
            )
