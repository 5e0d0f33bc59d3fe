"""atheris target: bytes -> the server's request parsing, called directly (no network, no event
loop): the JSON body (inputs.parse_body), the fields every endpoint reads (check_keys, the items,
pool, dimensions, the scalar options) and the /rollout job (rollout.parse_world_job) against a
V-JEPA 2-AC, a LeWM and a plain model, with local files on under a root. Only ApiError and jepa's
errors may escape.

The first byte picks the model; its top bit picks the form of the rest: raw bytes as the body, or
a body built from the bytes (atheris.FuzzedDataProvider) out of the endpoints' field names and
values of every JSON type (huge integers, NaN, deep nesting, paths, base64), which reaches the
parsers behind json.loads far more often than mutated bytes do.

    python tests/fuzz/fuzz_request.py -max_total_time=60 -dict=tests/fuzz/request.dict \\
        /tmp/request-work tests/fuzz/corpus/request        # docs/fuzzing.md
"""

from __future__ import annotations

import base64
import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

import atheris
from harness import CORPUS, instrument, run

import jepa
from jepa_server import handlers, inputs, rollout
from jepa_server.errors import ApiError
from jepa_server.security import LocalFiles

instrument("jepa_server", "jepa")

GGUF = CORPUS / "gguf"
MODELS = {name: jepa.Model(str(GGUF / f"{name}.gguf")) for name in ("hfvit", "vjepa2-ac", "lewm")}
ROOT = Path(tempfile.mkdtemp(prefix="jepa-fuzz-root-"))
(ROOT / "a.png").write_bytes((GGUF.parent / "media" / "tiny.png").read_bytes())
FILES = LocalFiles(True, str(ROOT))
LIMITS = inputs.Limits(max_items=64, max_frames=16, max_input_bytes=1 << 16)
EMBED_FIELDS = {"model", "input", "pool", "dimensions", "normalize", "encoding_format", "user", "as_video",
                "frames", "top_k", "return_latents", "keep_alive"}


class _Engine:
    """What handlers' field checks read of the runtime (runtime.Engine): the model and its name."""

    def __init__(self, model: jepa.Model) -> None:
        self.model = model
        self.model_id = "fuzz"


ENGINES = [_Engine(m) for m in MODELS.values()]
FIELDS = sorted(EMBED_FIELDS | {"inputs", "context", "goal", "actions", "state", "plan", "b64", "path", "url",
                                "video", "samples", "topk", "cem_steps", "horizon", "seed", "maxnorm",
                                "gripper_clamp"})
PNG = base64.b64encode((GGUF.parent / "media" / "tiny.png").read_bytes()).decode()
STRINGS = ["a.png", "../a.png", "/etc/passwd", "a.png\x00", "x" * 5000, "file:///a.png", "mean", "cls",
           "none", "", "base64", "float", "fuzz", PNG, "data:image/png;base64," + PNG, PNG[:-3],
           "\u00e9\ud800"]
NUMBERS = [0, 1, -1, 2, 7, 64, 4096, 10**30, -(10**30), 0.5, 1e-300, 3e38, 1e308, float("nan"), float("inf")]


def _value(fdp: atheris.FuzzedDataProvider, depth: int) -> Any:
    """One JSON value drawn from the bytes."""
    kind = fdp.ConsumeIntInRange(0, 7 if depth < 6 else 4)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.ConsumeBool()
    if kind == 2:
        return NUMBERS[fdp.ConsumeIntInRange(0, len(NUMBERS) - 1)] if fdp.ConsumeBool() else fdp.ConsumeInt(8)
    if kind == 3:
        return fdp.ConsumeFloat()
    if kind == 4:
        if fdp.ConsumeBool():
            return STRINGS[fdp.ConsumeIntInRange(0, len(STRINGS) - 1)]
        return fdp.ConsumeUnicode(16)
    if kind in (5, 6):
        return [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))]
    return _object(fdp, depth + 1)


def _object(fdp: atheris.FuzzedDataProvider, depth: int) -> dict[str, Any]:
    n = fdp.ConsumeIntInRange(0, 6)
    return {FIELDS[fdp.ConsumeIntInRange(0, len(FIELDS) - 1)]: _value(fdp, depth) for _ in range(n)}


def _fields(body: dict[str, Any], engine: _Engine) -> None:
    """The fields /v1/embeddings, /embed and /classify read, each by its own parser."""
    inputs.check_keys(body, EMBED_FIELDS)
    handlers._model_name(body)  # the registry resolves it; the field's own check is here
    handlers._keep_alive(body)
    pool = handlers._pool(engine.model, body)
    handlers._dimensions(engine, body, pool)  # type: ignore[arg-type]
    inputs.opt_str(body, "encoding_format", ("float", "base64"))
    inputs.opt_bool(body, "normalize")
    inputs.opt_int(body, "top_k", 1, 1000)
    inputs.opt_number(body, "frames", 0.0)
    inputs.parse_items(body.get("input"), FILES.resolve, LIMITS)


def one_input(data: bytes) -> None:
    if not data:
        return
    engine = ENGINES[(data[0] & 0x7F) % len(ENGINES)]
    raw = data[1:]
    if data[0] & 0x80:
        raw = json.dumps(_object(atheris.FuzzedDataProvider(raw), 0)).encode()  # NaN and Infinity included
    body = inputs.parse_body(raw, max_values=4096)
    with contextlib.suppress(ApiError, jepa.JepaError):  # refused: /rollout's parser still reads the body
        _fields(body, engine)
    rollout.parse_world_job(body, engine.model, engine.model_id, FILES.resolve, LIMITS)


if __name__ == "__main__":
    run(one_input, (ApiError, jepa.JepaError))
