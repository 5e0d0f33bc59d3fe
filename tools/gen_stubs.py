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
# The last line of an enum's own part: its members' table, naming the class.
_MEMBERS = re.compile(r"^    __members__: typing\.ClassVar\[dict\[str, (\w+)\]\]$")


def generate() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pybind11_stubgen", "jepa._engine", "-o", tmp, "--exit-code"],
            check=True,
            capture_output=True,
        )
        return compact_enums((Path(tmp) / "jepa" / "_engine.pyi").read_text())


def compact_enums(text: str) -> str:
    """Each enum class keeps its docstring and members; the methods every enum shares move to BASE.

    The shared methods are read from the stub itself (the class's name written as typing.Self), and
    every enum must carry exactly them: a pybind11 that gives one enum more fails here, loudly."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    shared: list[str] | None = None
    first_enum = -1
    i = 0
    while i < len(lines):
        m = _MEMBERS.match(lines[i].rstrip("\n"))
        if not m:
            out.append(lines[i])
            i += 1
            continue
        name = m.group(1)
        out.append(lines[i])
        end = i + 1
        while end < len(lines) and lines[end].startswith("    "):
            end += 1
        methods = [re.sub(rf"\b{name}\b", "typing.Self", line) for line in lines[i + 1 : end]]
        if shared is None:
            shared = methods
        elif methods != shared:
            raise SystemExit(f"gen_stubs: enum {name} has methods the other enums lack; update compact_enums")
        head = _class_line(out, name)
        out[head] = f"class {name}({BASE}):\n"
        if first_enum < 0:
            first_enum = head
        i = end
    if shared is None:
        return text
    return "".join([*out[:first_enum], f"class {BASE}:\n", _BASE_DOC, *shared, *out[first_enum:]])


def _class_line(out: list[str], name: str) -> int:
    for k in range(len(out) - 1, -1, -1):
        if out[k] == f"class {name}:\n":
            return k
    raise SystemExit(f"gen_stubs: no `class {name}:` above its __members__")


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
