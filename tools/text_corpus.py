"""Real English sentences available offline: the docstrings of Python's standard library, cut into
paragraphs of varied length (a line to a page), deduplicated and ordered deterministically. Used by
the real-weights tests (tests/test_text_real.py) and tools/bench/text.py."""

from __future__ import annotations

import importlib
import inspect
import re

MODULES = [
    "abc",
    "argparse",
    "ast",
    "asyncio",
    "base64",
    "bisect",
    "calendar",
    "codecs",
    "collections",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "gettext",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "locale",
    "logging",
    "lzma",
    "math",
    "mimetypes",
    "operator",
    "os",
    "pathlib",
    "pickle",
    "platform",
    "pprint",
    "queue",
    "random",
    "re",
    "reprlib",
    "secrets",
    "selectors",
    "shlex",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "ssl",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "time",
    "timeit",
    "tokenize",
    "traceback",
    "types",
    "typing",
    "unittest",
    "urllib",
    "uuid",
    "warnings",
    "weakref",
    "zipfile",
    "zlib",
]


def _docs() -> list[str]:
    out: list[str] = []
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        objs = [mod, *(getattr(mod, a) for a in sorted(dir(mod)) if not a.startswith("_"))]
        for obj in objs:
            try:
                doc = (
                    inspect.getdoc(obj)
                    if (inspect.ismodule(obj) and obj is mod) or not inspect.ismodule(obj)
                    else None
                )
            except Exception:
                doc = None
            if doc:
                out.append(doc)
    return out


def sentences(n: int = 600, min_chars: int = 8) -> list[str]:
    """n paragraphs of real text, every length class represented: one paragraph per docstring
    paragraph, whitespace collapsed, sorted by a stable hash of the text (no RNG)."""
    seen: dict[str, None] = {}
    docs = _docs()
    whole = {" ".join(d.split()): None for d in docs}  # whole docstrings: the long ones truncate
    for doc in docs:
        for para in re.split(r"\n\s*\n", doc):
            text = " ".join(para.split())
            if len(text) >= min_chars and not text.startswith((">>>", "...")):
                seen.setdefault(text, None)
    import hashlib

    ordered = sorted(seen, key=lambda t: hashlib.sha1(t.encode()).hexdigest())
    # Texts past 256 tokens are rare among paragraphs: one in twenty is a whole long docstring, so
    # truncation is exercised; the rest are paragraphs in hash order.
    long = sorted((t for t in whole if len(t) > 1500), key=lambda t: hashlib.sha1(t.encode()).hexdigest())
    picked = long[: n // 20]
    rest = [t for t in ordered if t not in set(picked)]
    return (picked + rest)[:n]
