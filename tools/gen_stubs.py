#!/usr/bin/env python3
"""Generate python/jepa/_engine.pyi from the built extension (pybind11-stubgen).

Hand-written stubs drift; this one is generated. `--check` exits 1 when the committed stub is stale."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "python" / "jepa" / "_engine.pyi"


def generate() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pybind11_stubgen", "jepa._engine", "-o", tmp, "--exit-code"],
            check=True,
            capture_output=True,
        )
        return (Path(tmp) / "jepa" / "_engine.pyi").read_text()


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
