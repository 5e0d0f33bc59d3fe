"""tools/bench/world_plan.py --smoke: every cell (V-JEPA 2-AC at H = 1, 2 and 4, LeWM's solver; f32, f16
and bf16 files; jepa.plan and /rollout at 1 and 4 concurrent planners) on tiny models, every served
plan jepa.plan's bit for bit; and its rendering."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import import_tool, smoke_record


@pytest.mark.cpu_class
def test_bench_world_plan_smoke(tmp_path: Path) -> None:
    data = smoke_record("bench/world_plan.py", tmp_path / "p.json", "--threads", "1", timeout=600)
    ftypes = ("f32", "f16", "bf16")
    cells = {(c["model"], c["ftype"], c["horizon"]) for c in data["cells"]}
    assert cells == {("ac", ft, h) for ft in ftypes for h in (1, 2, 4)} | {("lewm", ft, 5) for ft in ftypes}
    assert data["machine"]["simd"] and data["machine"]["kernels"] and not data["engine_changed"]
    assert data["held"]["jepa"] == data["machine"]["kernels"]  # the servers ran under the same mask
    for c in data["cells"]:
        assert c["jepa_plan"]["s"] > 0 and c["jepa_plan"]["encode_two_frames_s"] > 0
        assert c["plan"]["horizon"] == c["horizon"]
        one, four = c["rollout"]["1"], c["rollout"]["4"]
        assert (one["planners"], one["plans"], four["planners"], four["plans"]) == (1, 1, 4, 4)
        assert one["plans_s"] > 0 and four["plans_s"] > 0
        assert one["mismatches"] == four["mismatches"] == 0
    text = import_tool("render_docs").render_bench_world_plan(data)
    assert "V-JEPA 2-AC" in text and "LeWM" in text and "bit for bit" in text
