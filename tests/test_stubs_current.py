"""The committed _engine.pyi is what pybind11-stubgen generates from the built extension."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_engine_stub_is_current() -> None:
    cmd = [sys.executable, str(ROOT / "tools" / "gen_stubs.py"), "--check"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
