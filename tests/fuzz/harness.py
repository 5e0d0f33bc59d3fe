"""What the atheris targets share: the one rule (only the named exception classes may escape a call)
and the keep-going mode of long runs.

A target's `one_input(data)` runs the code under test; `run(one_input, allowed)` hands it to atheris.
An exception not in `allowed` is a finding: by default it propagates, so atheris stops, prints the
traceback and writes the input as crash-<sha1> (what CI's bounded run fails on). With
JEPA_FUZZ_FINDINGS=DIR a long run keeps going instead: each new (exception type, raising line) is
written once to DIR as <type>-<sha1>.bin with its traceback beside it (and said on stderr as it is
found: "== finding N").
"""

from __future__ import annotations

import gc
import hashlib
import os
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"

_seen: set[tuple[str, str]] = set()


def instrument(*packages: str) -> int:
    """Add coverage instrumentation to every loaded function of `packages` (and their submodules).
    atheris.instrument_imports skips modules an import hook loads, which is how the editable install
    loads jepa and jepa_server; this instruments them after import instead. Returns the count."""
    def ours(f: types.FunctionType) -> bool:
        mod = getattr(f, "__module__", None) or ""
        return any(mod == p or mod.startswith(p + ".") for p in packages)

    funcs = [f for f in gc.get_objects() if isinstance(f, types.FunctionType) and ours(f)]
    for f in funcs:
        atheris.instrument_func(f)
    return len(funcs)


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    return f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "?"


def _record(findings: Path, data: bytes, exc: BaseException) -> None:
    key = (type(exc).__name__, _where(exc))
    if key in _seen:
        return
    _seen.add(key)
    findings.mkdir(parents=True, exist_ok=True)
    name = f"{type(exc).__name__}-{hashlib.sha1(data).hexdigest()[:12]}"
    (findings / f"{name}.bin").write_bytes(data)
    text = "".join(traceback.format_exception(exc))
    (findings / f"{name}.txt").write_text(text)
    where = findings / f"{name}.bin"
    print(f"\n== finding {len(_seen)}: {key[0]} at {key[1]} -> {where}\n{text}", file=sys.stderr)


def run(one_input: Callable[[bytes], None], allowed: tuple[type[BaseException], ...]) -> None:
    """Fuzz `one_input` with atheris under the command line's libFuzzer flags."""
    env = os.environ.get("JEPA_FUZZ_FINDINGS")
    findings = Path(env) if env else None

    def test(data: bytes) -> None:
        try:
            one_input(data)
        except allowed:
            pass
        except Exception as exc:  # a finding
            if findings is None:
                raise
            _record(findings, data, exc)

    atheris.Setup(sys.argv, test)
    atheris.Fuzz()
