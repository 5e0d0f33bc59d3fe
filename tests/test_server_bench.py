"""tools/bench_server.py --smoke: the benchmark runs end to end (a tiny model, a few requests), so
it cannot rot, and its servers' vectors are the in-process vectors bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_server_smoke(tmp_path: Path) -> None:
    out = tmp_path / "server-bench.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench_server.py"), "--smoke", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["smoke"] is True and data["benchmark"] == "server-bench"
    assert {"cpu", "cores", "simd"} <= set(data["machine"]) and data["versions"]["jepa"]
    s = data["summary"]
    assert s["mismatches"] == 0
    for key in (
        "inproc_img_s",
        "server_img_s",
        "server_over_inproc",
        "server_b1_img_s",
        "batching_gain",
        "prepare_ms",
        "prepare_share_of_worker",
        "mean_batch",
        "latency_ms_p99",
    ):
        assert s[key] is not None and s[key] > 0, key
    cells = data["rounds"][0]
    assert set(cells) == {"inproc", "server-b8", "server-b1"}
    for name in ("server-b8", "server-b1"):
        c = cells[name]
        assert c["answered"] >= data["settings"]["requests"] and c["mean_batch"] >= 1
        assert set(c["latency_ms"]) == {"p50", "p95", "p99"}
    assert cells["server-b1"]["mean_batch"] == 1
    assert set(data["decode"]["photos"]) == set(data["settings"]["photos"])
