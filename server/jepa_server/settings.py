"""Server settings, declared once.

Every setting is a field of `Settings` with its flag, help and default in the field's metadata.
Values come from, highest first: command-line flags, JEPA_<NAME> environment variables, a TOML
file (--config), the declared default. Flags default to "unset" so they never override an
environment or file value by accident. The table in docs/serving.md is rendered from this
declaration by tools/render_docs.py (its serving-settings block), whose --check the test suite runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import stat
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union, cast, get_args, get_origin, get_type_hints

import jepa

from .toml_files import TomlError, parse_toml

# The server's own bound on --max-batch, not the engine's (jepa._engine.MAX_BATCH_LIMIT is far
# higher): jepa_batch_size keeps one histogram bucket per size up to it, and every item of a graph
# waits for the whole graph, so past a few items a larger batch buys little throughput and costs
# every request in it latency.
MAX_BATCH_SERVED = 32
ENV_PREFIX = "JEPA_"
# The response budget's bytes per float in a JSON answer: the longest repr of a float32 value as a
# Python float ("-1.1754943508222875e-38", 23 characters) and its separator, with room to spare.
FLOAT_JSON_BYTES = 25
# The largest --config file read: a settings file is a few hundred bytes.
MAX_CONFIG_BYTES = 1 << 20
CONFIG_HELP = (f"A TOML file of settings named as the fields (`max_batch = 16`); unknown names are refused. "
               f"Read only if it is a regular file of at most {MAX_CONFIG_BYTES >> 20} MiB.")


def _opt(
    *flags: str,
    help: str,
    default: Any = None,
    env: bool = True,
    metavar: str | None = None,
    secret: bool = False,
) -> Any:
    """A field with its command-line flags and help; `env` lets JEPA_<NAME> set it."""
    meta = {"flags": flags, "help": help, "env": env, "metavar": metavar}
    return field(default=default, repr=not secret, metadata=meta)


class SettingsError(ValueError):
    """A setting is unknown, of the wrong type, or out of range."""


@dataclass(frozen=True)
class Settings:
    # One declaration per setting (flag, environment, default, help): the rows share a shape on
    # purpose; `duplicates` pairs them. The docs table and the parser are made from them.
    # -- the model
    model: tuple[str, ...] = _opt(
        "-m",
        "--model",
        default=(),
        metavar="PATH",
        help="GGUF model file to serve, loaded at startup and kept resident; repeat for more (JEPA_MODEL: "
        "comma-separated). The first is the default model of a request that names none.",
    )
    models_dir: str | None = _opt(
        "--models-dir",
        metavar="DIR",
        help="Serve every GGUF file in DIR by its id (the file name without .gguf, or a name from "
        "DIR/models.toml), "
        "loaded on its first request and unloaded after --keep-alive-s idle.",
    )
    demo: bool = _opt(
        "--demo", default=False, help="Serve the built-in tiny random-weights demo model (no -m needed)."
    )
    model_id: str | None = _opt(
        "--model-id",
        "--model-name",  # jepa.cpp's spelling of the same setting
        help="Name the model is served as (the `model` field). Default: the file's base name without .gguf.",
    )
    gpu: int | None = _opt(
        "--gpu", metavar="N", help="Run on CUDA device N (`--gpu` alone: 0). Needs a CUDA build."
    )
    devices: str | None = _opt(
        "--devices",
        metavar="LIST",
        help="Replicate each model on these devices (`cpu,cuda:0,cuda:1`), each with its own workers; they "
        "pull work from one queue. Default: the CPU, or --gpu's device.",
    )
    cpu_batch_mb: float = _opt(
        "--cpu-batch-mb",
        default=1024.0,
        help="Activation memory one CPU batch may take, in MiB: the CPU replica's batch budget in the "
        "scheduler (a GPU's comes from its free memory once the model is placed); 0: --max-batch alone.",
    )
    no_mmap: bool = _opt(
        "--no-mmap",
        default=False,
        help="Read every weight into memory of the process's own instead of mapping the file (a file that "
        "may be rewritten in place while served needs it).",
    )
    # -- residency (the registry): models loaded on demand, kept while used, unloaded when idle
    max_loaded_models: int = _opt(
        "--max-loaded-models",
        default=3,
        help="Most models resident at once (0: no cap; the -m models always fit, with room for one "
        "--models-dir model beside them); loading one more unloads the least recently used "
        "idle --models-dir model, or waits its turn (at most --queue-timeout-s, then 503 with Retry-After) "
        "while a busy one finishes its requests.",
    )
    max_concurrent_loads: int = _opt(
        "--max-concurrent-loads",
        default=2,
        help="Most cold loads running at once (other models wait their turn).",
    )
    keep_alive_s: float = _opt(
        "--keep-alive-s",
        default=600.0,
        help="How long a --models-dir model stays resident after its last request; a request's `keep_alive` "
        "(seconds) overrides it for its model. -m models stay resident.",
    )
    max_keep_alive_s: float | None = _opt(
        "--max-keep-alive-s",
        metavar="S",
        help="The most a request's `keep_alive` may keep its model resident (a longer one counts as this "
        "much). Default: the model's own keep-alive (--keep-alive-s, or its models.toml keep_alive_s), "
        "so a client can only shorten its own stay.",
    )
    skip_smoke_test: bool = _opt(
        "--skip-smoke-test",
        default=False,
        help="Mark a model resident once loaded, without first running one call of its own kind on every "
        "worker (the smoke test, which fails a model that loads but cannot infer with 503 and its reason).",
    )
    # -- the network
    host: str = _opt(
        "--host", default="127.0.0.1", help="Address to bind. Anything but loopback prints a warning."
    )
    port: int = _opt("--port", default=8080, help="Port to bind; 0 picks a free one and prints it.")
    api_key: str | None = _opt(
        "--api-key",
        metavar="KEY",
        secret=True,
        help="Require `Authorization: Bearer KEY` on every endpoint but /health and /metrics.",
    )
    # -- compute
    workers: int = _opt("--workers", default=1, help="Worker threads; each owns one engine context.")
    threads: int = _opt(
        "-t",
        "--threads",
        default=0,
        help="CPU threads per graph; 0: the CPUs this process may use (jepa.default_threads: its affinity, "
        "capped by its cgroup's CPU quota) divided by workers.",
    )
    max_batch: int = _opt(
        "--max-batch",
        default=8,
        help=f"Most items in one graph (1..{MAX_BATCH_SERVED}: the server's latency bound, not the engine's "
        "limit).",
    )
    max_wait_ms: float = _opt(
        "--max-wait-ms",
        default=5.0,
        help="How long a partial batch waits for more items, only while nothing else waits; 0 never waits.",
    )
    prep_threads: int = _opt(
        "--prep-threads",
        default=0,
        help="Threads decoding and preprocessing inputs; 0: min(4, the CPUs this process may use).",
    )
    # -- limits: the request budget (docs/serving.md "Budgets"); each is checked before its cost is paid
    max_items: int = _opt(
        "--max-items",
        default=2048,
        help="Most items in one request: OpenAI's own limit, so every OpenAI client's batches fit; the work "
        "is bounded by the characters, tokens, bytes and pixels below.",
    )
    max_frames: int = _opt("--max-frames", default=128, help="Most frames in one clip or video item.")
    max_body_mb: float = _opt("--max-body-mb", default=32.0, help="Largest request body, in MiB (413 above).")
    max_json_values: int = _opt(
        "--max-json-values",
        default=1_000_000,
        help="Most JSON values one body may hold, counted from its commas and opening brackets before it "
        "is parsed (413 above): parsing holds the interpreter, so this bounds how long one body can.",
    )
    max_bodies_mb: float = _opt(
        "--max-bodies-mb",
        default=256.0,
        help="Most MiB of request bodies held at once over all requests: a body's bytes are held as they "
        "arrive (a compressed one: --max-body-mb while it inflates) until its answer; a request that "
        "does not fit waits its turn up to --queue-timeout-s, then answers 503 with Retry-After. Never "
        "less than --max-body-mb.",
    )
    max_input_mb: float = _opt(
        "--max-input-mb",
        default=32.0,
        help="Largest input file read (a local path, a video, a b64 item once decoded), in MiB; checked "
        "from its size before reading (413 above).",
    )
    max_image_pixels: int = _opt(
        "--max-image-pixels",
        default=40_000_000,
        help="Most pixels (width × height) in one image or video frame, read from its header before "
        "decoding (413 above).",
    )
    max_request_pixels: int = _opt(
        "--max-request-pixels",
        default=300_000_000,
        help="Most pixels one request decodes and keeps over all its images and sampled frames; a video's "
        "frames × width × height is counted from its header (413 above).",
    )
    max_clip_pixels: int = _opt(
        "--max-clip-pixels",
        default=2_000_000_000,
        help="Most pixels decoded for one video, every frame counted whether it is sampled or not "
        "(413 above).",
    )
    max_response_mb: float = _opt(
        "--max-response-mb",
        default=32.0,
        help="Largest answer, in MiB, estimated at its largest before anything is computed (a float as "
        f"{FLOAT_JSON_BYTES} bytes of JSON, 16/3 in base64; 413 above).",
    )
    max_rollout_work: int = _opt(
        "--max-rollout-work",
        default=65_536,
        help="Most candidate-steps one /rollout runs: candidates × steps for a rollout, samples × "
        "horizon × cem_steps for a plan (400 above).",
    )
    # -- text models (family bert): bounded before tokenizing, then in tokens
    max_request_chars: int = _opt(
        "--max-request-chars",
        default=1_000_000,
        help="Most characters of text in one request to a text model, counted before tokenizing "
        "(413 above).",
    )
    max_request_tokens: int = _opt(
        "--max-request-tokens",
        default=131_072,
        help="Most tokens one request's texts tokenize to, after truncation to the model's max_seq_len "
        "(413 above).",
    )
    accept_token_ids: bool = _opt(
        "--accept-token-ids",
        default=False,
        help="Take token-id arrays as input of a text model. Off: refused (400 token_ids_refused), since "
        "clients tokenize with their own tokenizer (LangChain: tiktoken). On: only ids this model's "
        "own tokenizer makes, unpadded, with its special tokens around each text and none inside it.",
    )
    text_token_budget: int = _opt(
        "--text-token-budget",
        default=8192,
        help="Most tokens in one engine call of a text model: a batch's texts, shortest first, until the "
        "next would pass it (no padding either way).",
    )
    max_concurrent_requests: int = _opt(
        "--max-concurrent-requests", default=64, help="Requests computing or queued at once."
    )
    queue_timeout_s: float = _opt(
        "--queue-timeout-s",
        default=30.0,
        help="How long a request waits for a slot before it answers 503 with Retry-After.",
    )
    # -- time and connections
    request_timeout_s: float = _opt(
        "--request-timeout-s",
        default=120.0,
        help="Deadline of a request from its arrival: its queued work is dropped and a running rollout "
        "or plan stops between steps (504). Work whose client has gone is dropped the same way.",
    )
    header_timeout_s: float = _opt(
        "--header-timeout-s",
        default=10.0,
        help="Time a client has to send a request line and headers once it started (408, closed after).",
    )
    body_timeout_s: float = _opt(
        "--body-timeout-s",
        default=30.0,
        help="Time a client has to send a request's body (408 after).",
    )
    idle_timeout_s: float = _opt(
        "--idle-timeout-s", default=60.0, help="How long an idle keep-alive connection stays open."
    )
    max_connections: int = _opt(
        "--max-connections",
        default=256,
        help="Most open client connections; one more is answered 503 and closed.",
    )
    shutdown_timeout_s: float = _opt(
        "--shutdown-timeout-s",
        default=20.0,
        help="On SIGTERM or SIGINT: stop accepting, let in-flight requests finish this long, cancel the "
        "rest (a rollout stops between steps), exit.",
    )
    # -- local files
    allow_local_files: bool = _opt(
        "--allow-local-files", default=False, help="Accept server-local paths as inputs (off by default)."
    )
    files_root: str | None = _opt(
        "--files-root",
        metavar="DIR",
        help="Serve local paths only inside DIR, resolved against it (implies --allow-local-files).",
    )
    # -- logging
    verbose: int = _opt(
        "-v",
        "--verbose",
        default=0,
        help="More logging: -v debug (the real reasons of refusals), -vv the access log too.",
    )

    def __post_init__(self) -> None:
        # -m given once (a str: the tests, Settings(model=path)) or as a list (a TOML array, argparse)
        if isinstance(self.model, str):
            object.__setattr__(self, "model", (self.model,))
        elif isinstance(self.model, list):
            object.__setattr__(self, "model", tuple(self.model))
        _check_types(self)
        checks = [
            (self.port < 0 or self.port > 65535, "port must be in 0..65535"),
            (self.workers < 1, "workers must be at least 1"),
            (self.threads < 0, "threads must be 0 (auto) or more"),
            (not 1 <= self.max_batch <= MAX_BATCH_SERVED, f"max_batch must be in 1..{MAX_BATCH_SERVED}"),
            (self.max_wait_ms < 0, "max_wait_ms must be 0 or more"),
            (self.prep_threads < 0, "prep_threads must be 0 (auto) or more"),
            (self.max_items < 1, "max_items must be at least 1"),
            (self.max_frames < 1, "max_frames must be at least 1"),
            (self.max_body_mb <= 0, "max_body_mb must be positive"),
            (self.max_json_values < 1, "max_json_values must be at least 1"),
            (self.max_bodies_mb <= 0, "max_bodies_mb must be positive"),
            (self.max_input_mb <= 0, "max_input_mb must be positive"),
            (self.max_image_pixels < 1, "max_image_pixels must be at least 1"),
            (self.max_request_pixels < 1, "max_request_pixels must be at least 1"),
            (self.max_clip_pixels < 1, "max_clip_pixels must be at least 1"),
            (self.max_response_mb <= 0, "max_response_mb must be positive"),
            (self.max_rollout_work < 1, "max_rollout_work must be at least 1"),
            (self.max_request_chars < 1, "max_request_chars must be at least 1"),
            (self.max_request_tokens < 1, "max_request_tokens must be at least 1"),
            (self.text_token_budget < 1, "text_token_budget must be at least 1"),
            (self.request_timeout_s <= 0, "request_timeout_s must be positive"),
            (self.header_timeout_s <= 0, "header_timeout_s must be positive"),
            (self.body_timeout_s <= 0, "body_timeout_s must be positive"),
            (self.idle_timeout_s <= 0, "idle_timeout_s must be positive"),
            (self.max_connections < 1, "max_connections must be at least 1"),
            (self.shutdown_timeout_s < 0, "shutdown_timeout_s must be 0 or more"),
            (self.max_concurrent_requests < 1, "max_concurrent_requests must be at least 1"),
            (self.queue_timeout_s < 0, "queue_timeout_s must be 0 or more"),
            (self.gpu is not None and self.gpu < 0, "gpu must be a device number, 0 or more"),
            (self.gpu is not None and self.devices is not None, "give --gpu or --devices, not both"),
            (self.max_loaded_models < 0, "max_loaded_models must be 0 (no cap) or more"),
            (self.max_concurrent_loads < 1, "max_concurrent_loads must be at least 1"),
            (self.keep_alive_s < 0, "keep_alive_s must be 0 or more"),
            (self.max_keep_alive_s is not None and self.max_keep_alive_s < 0,
             "max_keep_alive_s must be 0 or more"),
            (self.cpu_batch_mb < 0, "cpu_batch_mb must be 0 (no budget) or more"),
            (any(not m for m in self.model), "model paths must not be empty"),
            (self.model_id is not None and len(self.model) > 1,
             "--model-id names the one -m model; with several, name them in a models.toml (--models-dir)"),
            (self.verbose < 0, "verbose must be 0 or more"),
            (self.api_key == "", "api_key must not be empty"),
            # A key a client can send in `Authorization: Bearer KEY`: visible ASCII, no spaces (a
            # newline or a non-ASCII character there is refused or mangled by every HTTP client).
            (self.api_key is not None and not all("!" <= c <= "~" for c in self.api_key),
             "api_key must be visible ASCII characters (no spaces, newlines or other characters a "
             "client cannot send in an Authorization header)"),
        ]
        for bad, message in checks:
            if bad:
                raise SettingsError(message)

    # -- derived values
    @property
    def local_files(self) -> bool:
        return self.allow_local_files or self.files_root is not None

    @property
    def graph_threads(self) -> int:
        return self.threads or max(1, jepa.default_threads() // self.workers)

    @property
    def decode_threads(self) -> int:
        return self.prep_threads or min(4, jepa.default_threads())

    @property
    def device(self) -> str:
        """The first device a model loads on (the one a single-device server uses)."""
        return self.device_list[0]

    @property
    def device_list(self) -> tuple[str, ...]:
        """--devices split and trimmed, or the one device of --gpu (default: the CPU)."""
        if self.devices is not None:
            return tuple(d.strip() for d in self.devices.split(",") if d.strip()) or ("cpu",)
        return ("cpu",) if self.gpu is None else (f"cuda:{self.gpu}",)

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)

    @property
    def max_bodies_bytes(self) -> int:
        """--max-bodies-mb, and never less than one largest body."""
        return max(int(self.max_bodies_mb * 1024 * 1024), self.max_body_bytes)

    @property
    def max_input_bytes(self) -> int:
        return int(self.max_input_mb * 1024 * 1024)

    @property
    def max_response_bytes(self) -> int:
        return int(self.max_response_mb * 1024 * 1024)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], source: str = "settings") -> Settings:
        """Build from a mapping of setting names (a config file); unknown names are refused."""
        return cls(**_coerce_all(values, source))


def _fields() -> list[dataclasses.Field[Any]]:
    return list(dataclasses.fields(Settings))


_HINTS: dict[str, Any] = {}


def _hint(name: str) -> Any:
    if not _HINTS:
        _HINTS.update(get_type_hints(Settings))
    return _HINTS[name]


def _base_type(name: str) -> type:
    """int for `int | None`, tuple for `tuple[str, ...]`, and so on."""
    hint = _hint(name)
    if get_origin(hint) is tuple:
        return tuple
    if get_origin(hint) in (Union, types.UnionType):
        return next(a for a in get_args(hint) if a is not type(None))
    return cast(type, hint)


def _optional(name: str) -> bool:
    return type(None) in get_args(_hint(name))


def _check_types(s: Settings) -> None:
    for f in _fields():
        value = getattr(s, f.name)
        if value is None and _optional(f.name):
            continue
        want = _base_type(f.name)
        if want is tuple:
            if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
                raise SettingsError(f"{f.name} must be a list of strings, got {value!r}")
            continue
        ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise SettingsError(f"{f.name} must be {want.__name__}, got {value!r}")
        if want is float and not math.isfinite(value):  # `nan`, `inf`: flags, JEPA_* and TOML all spell them
            flag = f.metadata["flags"][-1]
            raise SettingsError(f"{f.name} ({flag}) must be a finite number, got {value!r}")


def _coerce(name: str, value: Any, source: str) -> Any:
    """A value from a file or the environment, as the field's type."""
    want = _base_type(name)
    if want is tuple:  # a TOML array or string, or an environment value (comma-separated)
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        return tuple(value) if isinstance(value, list) else value
    if not isinstance(value, str) or want is str:
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value  # a wrong type is named by __post_init__
    text = value.strip()
    if want is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off", ""):
            return False
        raise SettingsError(f"{source}: {name} must be true or false, got {value!r}")
    try:
        return want(text)
    except ValueError:
        raise SettingsError(f"{source}: {name} must be {want.__name__}, got {value!r}") from None


def _coerce_all(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    names = {f.name for f in _fields()}
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        if name not in names:
            raise SettingsError(f"{source}: unknown setting {key!r}")
        out[name] = _coerce(name, value, source)
    return out


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in _fields():
        key = env_name(f.name)
        if f.metadata["env"] and key in env:
            out[f.name] = _coerce(f.name, env[key], f"environment {key}")
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jepa-server",
        description="Serve JEPA and text models (GGUF files: -m, or a --models-dir of them loaded on\n"
        "first use) over HTTP: OpenAI-shaped /v1/embeddings, /embed, /classify, /rollout, /health, /info.",
        epilog="subcommands:\n"
        "  jepa-server info [flags]     the settings (and where each came from), the devices and the\n"
        "                               models it would serve; loads nothing\n"
        "  jepa-server check [flags]    the preflight: every model file checked (--warm: loaded and run\n"
        "                               once); exits non-zero naming the reason\n"
        "each takes --help for its own flags",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    for f in _fields():
        meta = f.metadata
        kwargs: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": meta["help"]}
        want = _base_type(f.name)
        if f.name == "verbose":
            kwargs["action"] = "count"
        elif want is bool:
            kwargs["action"] = "store_const"
            kwargs["const"] = True
        elif f.name == "gpu":
            kwargs.update(nargs="?", const=0, type=int, metavar=meta["metavar"])
        elif want is tuple:
            kwargs.update(action="append", metavar=meta["metavar"])
        else:
            kwargs.update(type=want, metavar=meta["metavar"] or f.name.upper())
        parser.add_argument(*meta["flags"], **kwargs)
    return parser


def subcommand_args(
    name: str, doc: str, own: str, argv: Sequence[str] | None, add: Callable[[argparse.ArgumentParser], Any]
) -> tuple[argparse.Namespace, list[str]] | None:
    """A `jepa-server NAME` subcommand's own flags (declared by `add`, spelled `own` in its usage)
    and the rest, which are the server's own settings. None when -h was asked (printed)."""
    p = argparse.ArgumentParser(prog=f"jepa-server {name}", add_help=False)
    add(p)
    p.add_argument("-h", "--help", action="store_true")
    ns, rest = p.parse_known_args(argv)
    if ns.help:
        print(doc)
        print(f"usage: jepa-server {name} {own} [jepa-server's flags: -m FILE, --models-dir DIR, "
              "--config FILE, ...]")
        return None
    return ns, rest


def load_settings(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from flags over environment over the --config file over the defaults."""
    return resolve_settings(argv, env)[0]


def resolve_settings(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> tuple[Settings, dict[str, str]]:
    """load_settings, and where each value came from: "flag", "env JEPA_X", "config FILE" or
    "default" (what `jepa-server info` prints)."""
    env = os.environ if env is None else env
    flags = vars(build_parser().parse_args(argv))
    config = flags.pop("config", None) or env.get(ENV_PREFIX + "CONFIG")
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    if config:
        from_file = _coerce_all(_read_config(config), config)
        values.update(from_file)
        source.update(dict.fromkeys(from_file, f"config {config}"))
    from_env = _from_env(env)
    values.update(from_env)
    source.update({k: f"env {env_name(k)}" for k in from_env})
    values.update(flags)
    source.update(dict.fromkeys(flags, "flag"))
    settings = Settings(**values)
    return settings, {f.name: source.get(f.name, "default") for f in _fields()}


def _read_config(path: str) -> dict[str, Any]:
    """The --config file's TOML. Only a regular file of at most MAX_CONFIG_BYTES is read: it is opened
    with O_NONBLOCK and checked with fstat first, so a FIFO cannot hang startup, nor /dev/zero fill
    memory."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SettingsError(f"the config file {path} is not a regular file")
            if st.st_size > MAX_CONFIG_BYTES:
                raise SettingsError(
                    f"the config file {path} is {st.st_size} bytes; a settings file is at most "
                    f"{MAX_CONFIG_BYTES}")
            data = os.read(fd, MAX_CONFIG_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_CONFIG_BYTES:  # it grew while read
            raise SettingsError(f"the config file {path} is over {MAX_CONFIG_BYTES} bytes")
        return parse_toml(data)
    except (OSError, TomlError) as exc:
        raise SettingsError(f"cannot read the config file {path}: {exc}") from None


# -- the docs table: docs/serving.md's serving-settings block (tools/render_docs.py) ------------


def settings_table() -> str:
    """The markdown table of every setting: flag, environment variable, default, meaning."""
    rows = ["| Flag | Environment | Default | Meaning |", "|---|---|---|---|"]
    rows.append(f"| `--config` | `{ENV_PREFIX}CONFIG` | unset | {CONFIG_HELP} |")
    for f in _fields():
        flags = ", ".join(f"`{x}`" for x in f.metadata["flags"])
        env = f"`{env_name(f.name)}`" if f.metadata["env"] else ""
        rows.append(f"| {flags} | {env} | {_show_default(f.default)} | {f.metadata['help']} |")
    return "\n".join(rows)


def _show_default(value: Any) -> str:
    if value is None or value == ():
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"`{value}`"
