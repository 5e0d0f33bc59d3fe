"""The committed _engine.pyi is what pybind11-stubgen generates from the built extension."""

from __future__ import annotations

from conftest import run_tool


def test_engine_stub_is_current() -> None:
    r = run_tool("gen_stubs.py", "--check")
    assert r.returncode == 0, r.stderr
