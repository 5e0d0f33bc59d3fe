"""atheris target: bytes -> jepa.media.prepare for an image model and a video model, the way the
CLI, jepa.embed and the server read an uploaded file. Only jepa's own errors may escape.

    python tests/fuzz/fuzz_media.py -max_total_time=60 -dict=tests/fuzz/media.dict \\
        /tmp/media-work tests/fuzz/corpus/media        # docs/fuzzing.md

The first byte picks the model, as_video (None / True / False) and frames (None or 1-3); the rest
is the file. Pixels are capped at 2^22 per image (jepa.media.MAX_PIXELS) so one input stays small.
"""

from __future__ import annotations

from harness import CORPUS, instrument, run

import jepa
from jepa import media

instrument("jepa", "PIL")

media.MAX_PIXELS = 1 << 22
GGUF = CORPUS / "gguf"
MODELS = (jepa.Model(str(GGUF / "hfvit.gguf")), jepa.Model(str(GGUF / "vjepa2.gguf")))
AS_VIDEO = (None, True, False)


def one_input(data: bytes) -> None:
    if not data:
        return
    mode, payload = data[0], data[1:]
    model = MODELS[mode & 1]
    as_video = AS_VIDEO[(mode >> 1) % 3]
    frames = None if (mode >> 3) & 3 == 0 else (mode >> 3) & 3
    out = media.prepare(payload, model, as_video=as_video, frames=frames)
    # What prepare promises: float32 [C, T, S, S] at the model's crop, finite.
    crop = model.info.preprocess.crop
    if out.dtype.name != "float32" or out.ndim != 4 or out.shape[2:] != (crop, crop):
        raise AssertionError(f"prepare returned {out.dtype} {out.shape}")


if __name__ == "__main__":
    run(one_input, (jepa.JepaError,))
