"""tools/bench/ray.py --smoke: the Ray-against-jepa-server benchmark runs end to end (a tiny model, a
few requests, every cell of the full run), so it cannot rot; every answer it checked is in-process
jepa.embed's bit for bit; and tools/render_docs.py renders what it writes."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import import_tool, smoke_record

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return smoke_record("bench/ray.py", tmp_path_factory.mktemp("bench-ray") / "bench-ray.json", timeout=240)


def test_the_run_is_recorded(smoke: dict[str, Any]) -> None:
    assert smoke["smoke"] is True and smoke["benchmark"] == "bench-ray" and smoke["schema"] == 1
    m = smoke["machine"]
    assert {"cpu", "cores", "simd", "flags"} <= set(m) and m["flags"]
    assert smoke["versions"]["ray"] and smoke["versions"]["jepa"] and smoke["commit"]
    assert smoke["engine_changed_during_run"] is False


def test_every_cell_ran_and_every_answer_was_right(smoke: dict[str, Any]) -> None:
    cells = smoke["settings"]["cells"]
    want = {cells["ray"], cells["split"], cells["whole"]}
    want |= {f"health-{cells[k]}{c}" for k in ("ray", "split") for c in ("", "-c1")}
    for r in smoke["rounds"]:
        assert set(r) == want
        for name, cell in r.items():
            assert cell["mismatches"] == 0 and cell["req_s"] > 0, name
            assert 0 <= cell["machine_cpu_share"] <= 1, name
    s = smoke["summary"]
    assert s["mismatches"] == 0 and s["ray_over_server"] > 0 and s["goal"] == 0.8
    assert set(s["latency_ms"]) == {cells["ray"], cells["split"], cells["whole"]}
    for lat in s["latency_ms"].values():
        assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"]
    # each path's CPU per request was read from its own processes
    cpu = s["cpu_ms_per_req"]
    assert set(cpu) == set(s["latency_ms"]) and all(v > 0 for v in cpu.values())
    assert s["ray_over_server_by_cpu"] > 0
    # the hop was measured, both replicas answered, and the memory of each process was read
    assert s["hop"]["unix_hop_ms"] > 0 and s["hop"]["tcp_loopback_ms"] > 0
    assert len(s["replica_spread"]) == smoke["settings"]["replicas"]
    mem = s["memory"]
    assert len(mem["ray_replica_rss_mb"]) == smoke["settings"]["replicas"]
    assert all(v > 0 for v in mem["ray_replica_rss_mb"]) and mem["ray_system_rss_mb"] > 0
    assert all(v > 0 for v in mem["server_rss_mb"].values())


def test_the_doc_block_renders_from_it(smoke: dict[str, Any]) -> None:
    render_docs = import_tool("render_docs")
    text = render_docs.RENDERERS["bench-ray"](smoke)
    assert text.startswith(render_docs.run_record(smoke))
    assert "| path | req/s | p50 ms |" in text and "CPU ms / request" in text and text.count("\n| ") >= 4
    assert "`--smoke` run" in text and "bit for bit" in text and "Resident memory" in text
