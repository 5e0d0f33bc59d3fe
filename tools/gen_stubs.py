#!/usr/bin/env python3
"""Generate python/jepa/_engine.pyi from the built extension (pybind11-stubgen).

Hand-written stubs drift; this one is generated. `--check` exits 1 when the committed stub is stale.

pybind11-stubgen writes the ~50 lines py::enum_ gives every enum (comparisons, int(), name, value,
pickling) into each enum class again; they are written here once, in a stub-only base class the enums
derive from (`_PybindEnum`: it is not in the module, only in its typing)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "python" / "jepa" / "_engine.pyi"
BASE = "_PybindEnum"
_BASE_DOC = (
    '    """What py::enum_ gives every enum below, written once'
    ' (typing only: at run time their base is pybind11_object)."""\n'
)


def generate() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pybind11_stubgen", "jepa._engine", "-o", tmp, "--exit-code"],
            check=True,
            capture_output=True,
        )
        return compact_enums((Path(tmp) / "jepa" / "_engine.pyi").read_text())


def compact_enums(text: str) -> str:
    """Each enum class keeps its summary and members; the methods every enum shares move to BASE.

    The shared methods are read from the stub itself (the class's name written as typing.Self), and
    every enum must carry exactly them: a pybind11 that gives one enum more fails here, loudly."""
    chunks = _top_level(text.splitlines(keepends=True))
    shared: list[str] | None = None
    first_enum = -1
    for n, chunk in enumerate(chunks):
        enum = _enum_parts(chunk)
        if enum is None:
            continue
        name, summary, members, methods = enum
        methods = [re.sub(rf"\b{name}\b", "typing.Self", line) for line in methods]
        if shared is None:
            shared, first_enum = methods, n
        elif methods != shared:
            raise SystemExit(f"gen_stubs: enum {name} has methods the other enums lack; update compact_enums")
        chunks[n] = [f"class {name}({BASE}):\n", f'    """{summary}"""\n', *members]
    if shared is None:
        return text
    chunks.insert(first_enum, [f"class {BASE}:\n", _BASE_DOC, *shared])
    return "".join(line for chunk in chunks for line in chunk)


def _top_level(lines: list[str]) -> list[list[str]]:
    """The stub cut before each line that starts in column 0 (a class, a def, a decorator, ...)."""
    chunks: list[list[str]] = []
    for line in lines:
        if not chunks or line[:1] not in (" ", "\n"):
            chunks.append([])
        chunks[-1].append(line)
    return chunks


def _enum_parts(chunk: list[str]) -> tuple[str, str, list[str], list[str]] | None:
    """(name, docstring summary, member lines up to __members__, methods) of a py::enum_ class, else None.

    pybind11 appends a "Members:" list to the enum's docstring; the stub lists them as ClassVars already."""
    head = re.fullmatch(r"class (\w+):\n", chunk[0])
    if head is None:
        return None
    name = head.group(1)
    table = f"    __members__: typing.ClassVar[dict[str, {name}]]\n"
    if table not in chunk or chunk[1] != '    """\n':
        return None
    close = chunk.index('    """\n', 2)
    doc = [line.strip() for line in chunk[2:close]]
    summary = " ".join(doc[: doc.index("Members:")] if "Members:" in doc else doc).strip()
    end = chunk.index(table) + 1
    return name, summary, chunk[close + 1 : end], chunk[end:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="fail when the committed stub differs")
    args = ap.parse_args()
    text = generate()
    if args.check:
        if not STUB.exists() or STUB.read_text() != text:
            print(f"{STUB.relative_to(ROOT)} is stale: run tools/gen_stubs.py", file=sys.stderr)
            return 1
        return 0
    STUB.write_text(text)
    print(f"wrote {STUB.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
