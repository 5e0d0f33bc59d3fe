"""tools/soak.py's short run (CI's version of the 30-minute soak): a server driven with mixed valid
and hostile traffic answers every valid request, refuses every hostile one as expected (never a
5xx, never a traceback), stays up and keeps RSS, fds and threads flat."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_server_support import demo_path

ROOT = Path(__file__).resolve().parents[1]


def test_a_short_soak_holds(tmp_path: Path) -> None:
    demo_path()  # written once, before the server starts
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "soak.py"),
            "--seconds",
            "20",
            "--concurrency",
            "8",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    record = json.loads(out.read_text())
    assert proc.returncode == 0 and record["ok"], (
        record["checks"],
        record["failures"][:5],
        proc.stderr[-2000:],
    )
    assert record["n_failures"] == 0 and record["tracebacks_logged"] == 0
    kinds = record["by_kind"]
    assert kinds["embed"].get("200", 0) > 0 and kinds["slow_headers"].get("408", 0) > 0, kinds
    assert record["commit"] and record["cpu"]["cores"] and len(record["samples"]) >= 10
