"""The server's budgets, declared once: docs/serving.md's "Budgets" table is rendered from BUDGETS
(tools/render_docs.py), each bound's default read from the settings declaration, so a changed
default cannot leave the docs behind. tests/test_server_refusals.py holds every limit setting to a row."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .settings import Settings


@dataclass(frozen=True)
class Budget:
    what: str
    settings: tuple[str, ...]  # the Settings fields that set the bound ("" rows have a fixed bound)
    checked: str
    refusal: str
    fixed: str = ""  # the bound when no setting sets it


BUDGETS: tuple[Budget, ...] = (
    Budget(
        "the body",
        ("max_body_mb",),
        "`Content-Length` before any handler (a chunked body as it is read; a gzip / deflate body as "
        "it inflates, after the API key, on a thread)",
        "413 `request_too_large`",
    ),
    Budget(
        "JSON values per body",
        ("max_json_values",),
        "the body's commas and opening brackets (outside strings), counted before it is parsed, on a "
        "thread: the parser holds the interpreter while it runs",
        "413 `too_many_values`",
    ),
    Budget(
        "bodies held at once",
        ("max_bodies_mb",),
        "as a body's bytes arrive (a compressed one: `--max-body-mb` while it inflates), held until its "
        "answer; a request that does not fit waits its turn up to `--queue-timeout-s` (one under way "
        "goes first)",
        "503 `overloaded` with `Retry-After`",
    ),
    Budget(
        "items, frames",
        ("max_items", "max_frames"),
        "the parsed request",
        "400 `too_many_items`, `too_many_frames`",
    ),
    Budget(
        "bytes read per input",
        ("max_input_mb",),
        "a b64 string's length before decoding; a local file's `fstat` size before reading",
        "413 `input_too_large`",
    ),
    Budget(
        "pixels per image or frame",
        ("max_image_pixels",),
        "the image's header (or the video stream's), before any pixel decodes",
        "413 `input_too_large`",
    ),
    Budget(
        "pixels per request",
        ("max_request_pixels",),
        "summed over the request's images and sampled frames; a video's `frames × width × height` from "
        "its header, before decoding",
        "413 `input_too_large`",
    ),
    Budget(
        "pixels decoded per video",
        ("max_clip_pixels",),
        "every frame the decoder produces, sampled or not",
        "413 `input_too_large`",
    ),
    Budget(
        "memory per video",
        (),
        "each sampled frame is resized and normalised as it decodes",
        "—",
        fixed="one full-resolution frame at a time",
    ),
    Budget(
        "text per request",
        ("max_request_chars",),
        "the parsed request's strings (text models), before tokenizing",
        "413 `input_too_large`",
    ),
    Budget(
        "tokens per request",
        ("max_request_tokens",),
        "the texts once tokenized and truncated to the model's max_seq_len (token-id arrays as given), "
        "before any is encoded",
        "413 `input_too_large`",
    ),
    Budget(
        "tokens per engine call",
        ("text_token_budget",),
        "a text batch, shortest texts first: a call ends before the text that would pass it",
        "— (batches are cut, nothing refused)",
    ),
    Budget(
        "the answer",
        ("max_response_mb",),
        "estimated at its largest from the request alone (a float as 25 bytes of JSON, 16/3 in base64; "
        "pool `none` as every token), before anything is decoded",
        "413 `response_too_large`",
    ),
    Budget(
        "/rollout compute",
        ("max_rollout_work",),
        "candidate-steps: K × H for a rollout, samples × horizon × cem_steps for a plan (the planner's "
        "defaults for what is not given)",
        "400 `too_much_work` naming `actions` or `plan`",
    ),
    Budget(
        "/rollout numbers",
        (),
        "the parsed request (3e38 overflowed float32 inside the model)",
        "400 `invalid_value` naming the field",
        fixed="\\|x\\| ≤ 1e6 in `actions` and `state`",
    ),
    Budget(
        "a request's time",
        ("request_timeout_s",),
        "from its arrival: its queued work is dropped, a running rollout or plan stops at its next "
        "predictor step",
        "504 `deadline_exceeded`",
    ),
    Budget(
        "a client that leaves",
        (),
        "its handler is cancelled: queued work dropped, a rollout stops at its next step",
        'counted as `status="499"`',
        fixed="—",
    ),
    Budget(
        "request line and headers",
        ("header_timeout_s",),
        "from the request's first byte",
        "408 `header_timeout`, connection closed",
    ),
    Budget("the body's arrival", ("body_timeout_s",), "while the body is read", "408 `body_timeout`"),
    Budget("idle keep-alive connections", ("idle_timeout_s",), "between requests", "closed"),
    Budget(
        "open connections",
        ("max_connections",),
        "when a connection opens",
        "503 `too_many_connections`, closed",
    ),
    Budget(
        "requests computing or queued",
        ("max_concurrent_requests", "queue_timeout_s"),
        "admission",
        "503 `overloaded` with `Retry-After`",
    ),
    Budget(
        "resident models, cold loads",
        ("max_loaded_models", "max_concurrent_loads"),
        "before a cold load: one more resident model unloads the least recently used idle one, or waits "
        "in one first-come line (up to `--queue-timeout-s`) while a busy one finishes its requests; loads "
        "past the cap wait their turn (a warm request never waits)",
        "503 `models_busy` with `Retry-After`",
    ),
    Budget(
        "a request's `keep_alive`",
        ("max_keep_alive_s",),
        "when the request ends: it keeps its model at most this long (unset: the model's own keep-alive)",
        "counted as the bound",
    ),
    Budget(
        "shutdown",
        ("shutdown_timeout_s",),
        "SIGTERM / SIGINT: stop accepting (new requests on open connections answer 503 `shutting_down`), "
        "let in-flight requests finish this long, cancel the rest, stop the workers (at most 5 s more), "
        "exit; a second signal exits at once",
        "—",
    ),
)


def _bound(name: str) -> str:
    field = {f.name: f for f in dataclasses.fields(Settings)}[name]
    default = field.default
    if isinstance(default, float) and default == int(default) and default >= 1e6:
        value = f"{default / 1e6:g} M"
    elif isinstance(default, int) and default >= 1_000_000:
        value = f"{default / 1e9:g} G" if default >= 1_000_000_000 else f"{default / 1e6:g} M"
    elif default is None:
        value = "unset"
    else:
        value = f"{default:g}" if isinstance(default, float) else str(default)
    return f"`{field.metadata['flags'][-1]}` {value}"


def budgets_table() -> str:
    rows = ["| what | bound (flag, default) | checked | refusal |", "|---|---|---|---|"]
    for b in BUDGETS:
        bound = ", ".join(_bound(s) for s in b.settings) if b.settings else b.fixed
        rows.append(f"| {b.what} | {bound} | {b.checked} | {b.refusal} |")
    return "\n".join(rows) + "\n"
