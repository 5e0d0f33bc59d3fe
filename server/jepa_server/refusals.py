"""Every refusal the server answers, declared once: docs/serving.md's "Refusals" table is rendered
from REFUSALS (tools/render_docs.py), and tests/test_server_refusals.py holds the declaration to the
codes the server's source raises, so a new code cannot ship undocumented and a documented one cannot
linger after it is gone."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import INVALID, NOT_FOUND, SERVER


@dataclass(frozen=True)
class Refusal:
    status: int
    when: str
    codes: tuple[str, ...]
    type: str = INVALID  # OpenAI's error type


# Data, one row per status and case: the rows share a shape on purpose (`duplicates` pairs them).
REFUSALS: tuple[Refusal, ...] = (
    Refusal(400, "the body is not JSON, or not a JSON object", ("invalid_json",)),
    Refusal(
        400,
        "an unknown or missing field; an array where an object belongs; a wrong type or value",
        ("unknown_field", "missing_field", "invalid_item", "invalid_value"),
    ),
    Refusal(400, "truncated or invalid base64", ("invalid_base64",)),
    Refusal(
        400,
        "an image or a video sent to a text model; text or token ids sent to an image or video model "
        "(the message names the model's modality)",
        ("wrong_modality",),
    ),
    Refusal(
        400,
        "token-id arrays sent to a text model of a server started without `--accept-token-ids` (a "
        "client's ids are its own tokenizer's: send strings)",
        ("token_ids_refused",),
    ),
    Refusal(
        400,
        "bytes that are not an image (or video), or an input the engine refuses (by class)",
        ("invalid_input", "unsupported"),
    ),
    Refusal(400, "a `url` item (the server fetches nothing)", ("url",)),
    Refusal(
        400,
        "a local path while local files are off; a path refused under `--files-root`",
        ("local_files_disabled", "invalid_path"),
    ),
    Refusal(
        400,
        "more than `--max-items` items, more than `--max-frames` frames",
        ("too_many_items", "too_many_frames"),
    ),
    Refusal(400, "wrong action or state shapes (the model's action / state width)", ("invalid_shape",)),
    Refusal(
        400,
        "`/classify` without a head, `/rollout` without a world-model predictor",
        ("no_classifier_head", "not_a_world_model"),
    ),
    Refusal(
        400,
        "a request line or header aiohttp cannot parse; a body nested deeper than 32 levels, "
        "a gzip / deflate body that is broken, or a body that ends early",
        ("bad_request", "invalid_body", "incomplete_body"),
    ),
    Refusal(400, "a `/rollout` over `--max-rollout-work`", ("too_much_work",)),
    Refusal(401, "a missing or wrong API key", ("invalid_api_key",)),
    Refusal(404, "an unknown route", ("unknown_route",), NOT_FOUND),
    Refusal(400, "no `model` while the server serves several and no -m default", ("model_required",)),
    Refusal(404, "a `model` that is not served (the message lists what is)", ("model_not_found",)),
    Refusal(405, "a wrong method (the `Allow` header lists the right one)", ("method_not_allowed",)),
    Refusal(
        408, "headers or body not received in time", ("request_timeout", "header_timeout", "body_timeout")
    ),
    Refusal(
        413,
        "a body over `--max-body-mb` (refused from `Content-Length` before any handler runs; a gzip / "
        "deflate body once its inflated bytes pass it, inflated on a thread after the API key)",
        ("request_too_large",),
    ),
    Refusal(
        413,
        "a body holding more than `--max-json-values` JSON values (counted before it is parsed)",
        ("too_many_values",),
    ),
    Refusal(
        413,
        "an input, image, request's pixels or answer over its budget (Budgets); an engine "
        "limit met while reading the request, or its per-call allocation cap (`max_output_bytes`)",
        ("input_too_large", "response_too_large", "resource_limit"),
    ),
    Refusal(414, "an over-long URI", ("uri_too_long",)),
    Refusal(415, "a `Content-Encoding` other than identity, gzip or deflate (one of them, not a list)",
            ("unsupported_encoding",)),
    Refusal(417, "an `Expect` header other than `100-continue`", ("expectation_failed",)),
    Refusal(422, "an answer holding a non-finite number", ("non_finite_output",)),
    Refusal(431, "an over-long header", ("headers_too_large",)),
    Refusal(
        503,
        "no admission slot, or no room in `--max-bodies-mb` for the body, within `--queue-timeout-s` "
        "(with `Retry-After`); the model still "
        "loading; too many connections; shutting down; the engine out of memory while computing",
        (
            "overloaded",
            "not_ready",
            "too_many_connections",
            "shutting_down",
            "resource_exhausted",
            "unavailable",
        ),
        SERVER,
    ),
    Refusal(
        503,
        "a text model's own tokenizer failed on the request's texts (HF tokenizers raised or panicked: "
        "a pathological `tokenizer.json`); the file is at fault, so no `Retry-After`",
        ("tokenizer_failed",),
        SERVER,
    ),
    Refusal(
        503,
        "a model that failed to load or its smoke test (with the reason; the same answer until its backoff "
        "passes or its file changes); a cold load over `--max-loaded-models` that found no room within "
        "`--queue-timeout-s`, or where every resident model is an `-m` one (both with `Retry-After`)",
        ("model_load_failed", "models_busy"),
        SERVER,
    ),
    Refusal(
        503,
        "the model's file changed under the running server (rewritten or truncated in place: update "
        "model files by rename); the model is loaded again for the next request (with `Retry-After`)",
        ("model_file_changed",),
        SERVER,
    ),
    Refusal(
        504,
        "the request's deadline passed (`--request-timeout-s`); its work was stopped",
        ("deadline_exceeded",),
        SERVER,
    ),
    Refusal(
        505,
        "a request line that is not HTTP/1.0 or 1.1 (answered in HTTP/1.1)",
        ("http_version_not_supported",),
        SERVER,
    ),
    Refusal(
        500, "a failure of the engine or the server (logged)", ("engine_error", "internal_error"), SERVER
    ),
)


def refusals_table() -> str:
    rows = ["| status | when | `type` / `code` |", "|---|---|---|"]
    for r in REFUSALS:
        codes = ", ".join(f"`{c}`" for c in r.codes)
        rows.append(f"| {r.status} | {r.when} | `{r.type}` / {codes} |")
    return "\n".join(rows) + "\n"
