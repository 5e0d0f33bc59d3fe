"""The generated tables in docs/*.md are what tools/render_docs.py makes from tests/results/*.json."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_are_current() -> None:
    cmd = [sys.executable, str(ROOT / "tools" / "render_docs.py"), "--check"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_check_catches_a_stale_doc(tmp_path: Path) -> None:
    # The guard itself: a doc whose block does not match its rendering is reported stale.
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import render_docs
    finally:
        sys.path.pop(0)
    stale = "x\n<!-- BEGIN GENERATED: bench-engine -->\nold table\n<!-- END GENERATED: bench-engine -->\ny\n"
    fresh = render_docs.render_doc(stale)
    assert fresh != stale
    assert fresh.startswith("x\n<!-- BEGIN GENERATED: bench-engine -->\n")
    assert fresh.endswith("<!-- END GENERATED: bench-engine -->\ny\n")
    assert render_docs.render_doc(fresh) == fresh
