"""tools/bench/server.py --smoke: the benchmark runs end to end (tiny models, a few requests, every
kind of cell of the full grid), so it cannot rot; its servers' vectors and plans are the in-process
ones bit for bit; and tools/render_docs.py renders what it writes."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import import_tool, smoke_record

pytestmark = pytest.mark.cpu_class


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return smoke_record("bench/server.py", tmp_path_factory.mktemp("server-bench") / "server-bench.json")


def test_the_run_is_recorded(smoke: dict[str, Any]) -> None:
    assert smoke["smoke"] is True and smoke["benchmark"] == "server-bench" and smoke["schema"] == 2
    assert {"cpu", "cores", "simd", "cpu_mask", "kernels"} <= set(smoke["machine"])
    assert smoke["versions"]["jepa"]
    assert smoke["held"]["jepa"] == smoke["machine"]["kernels"] and smoke["versions"]["engine"]
    assert smoke["commit"] and smoke["engine_changed_during_run"] is False
    assert smoke["summary"]["mismatches"] == 0


def test_every_cell_of_the_grid_ran(smoke: dict[str, Any]) -> None:
    st = smoke["settings"]
    batches, clients = st["max_batch"], st["clients"]
    assert len(batches) >= 2 and len(clients) >= 2 and batches[0] == 1 and clients[0] == 1
    wait0 = f"embed-b{max(batches)}-c1-wait0"
    want = {f"inproc-b{b}" for b in batches} | {wait0}
    want |= {f"{k}-b{b}-c{c}" for k in ("embed", "health") for b in batches for c in clients}
    for r in smoke["rounds"]:
        assert set(r) == want
        for name, cell in r.items():
            assert cell["mismatches"] == 0, name
            assert 0 <= cell["others_cpu_share"] <= 1, name
        for b in batches:
            for c in clients:
                e = r[f"embed-b{b}-c{c}"]
                # warm-up + window (+ the tail that keeps it saturated), every answer checked
                assert e["answered"] >= c + st["requests"], (b, c)
                assert e["graphs"] >= 1 and 1 <= e["mean_batch"] <= b, (b, c)
                assert set(e["latency_ms"]) == {"p50", "p95", "p99"}
                assert r[f"health-b{b}-c{c}"]["answered"] >= c + st["health_requests"]
        assert r["embed-b1-c1"]["mean_batch"] == 1 and r[wait0]["mean_batch"] == 1
    assert "max-wait 0 ms" in smoke["server_startup"]["wait0"][1]


def test_the_summary_has_every_ratio(smoke: dict[str, Any]) -> None:
    s = smoke["summary"]
    st = smoke["settings"]
    rows = {(c["max_batch"], c["clients"], c["max_wait_ms"]): c for c in s["cells"]}
    assert set(rows) == {(b, c, None) for b in st["max_batch"] for c in st["clients"]} | {
        (max(st["max_batch"]), 1, 0.0)
    }
    for (b, _c, wait), row in rows.items():
        for key in ("req_s", "inproc_img_s", "server_over_inproc", "mean_batch"):
            assert row[key] is not None and row[key] > 0, key
        lat = row["latency_ms"]
        assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"]
        assert (row["batching_gain"] is None) == (b == 1 or wait is not None)
        assert (row["health_req_s"] is None) == (wait is not None)
    assert s["best_batching_gain"]["gain"] > 0 and s["saturated"]["server_over_inproc"] > 0
    assert all(g > 0 for g in s["inproc_batching_gain"].values())
    assert s["prepare_ms"] > 0 and 0 < s["prepare_share_of_worker"] <= 1
    assert set(smoke["decode"]["photos"]) == set(st["photos"])


def test_the_planner_cell(smoke: dict[str, Any]) -> None:
    p = smoke["planner"]
    n = p["planners"]
    assert n >= 2 and p["workers"] == n and p["mismatches"] == 0
    assert set(p["phases"]) == {"1", str(n)}
    for k, ph in p["phases"].items():
        assert ph["plans"] == int(k) * p["requests_per_client"] and ph["plans_s"] > 0
        per_plan = p["plan"]["samples"] * p["plan"]["cem_steps"]
        assert ph["rollouts_s"] == pytest.approx(ph["plans_s"] * per_plan, rel=0.01)
    # the memory phases (one plan, then n) and the timed ones, every plan checked
    assert p["plans_checked"] == 1 + n + (1 + n) * p["requests_per_client"]
    assert p["rss_mb_idle"] > 0 and p["rss_mb_first_planner"] >= 0
    assert p["rss_mb_per_added_planner"] is not None


def test_the_doc_block_renders_from_it(smoke: dict[str, Any]) -> None:
    render_docs = import_tool("render_docs")
    text = render_docs.RENDERERS["server-bench"](smoke)
    assert text.startswith(render_docs.run_record(smoke))
    assert "| max-batch | clients | req/s |" in text and "| planners |" in text
    assert text.count("\n| ") >= len(smoke["summary"]["cells"]) + len(smoke["planner"]["phases"])
    assert "`--smoke` run" in text and "bit for bit" in text
