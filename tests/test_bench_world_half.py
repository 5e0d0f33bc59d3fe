"""tools/bench/world_half.py: the half class's planning criteria (its `compare` on made-up traces), and
its --smoke run on the reference bundles and tiny random models, on every kernel path the CPU has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import import_tool, smoke_record


def _trace(values: list[list[float]], topk: int, actions: list[float]) -> dict[str, Any]:
    from jepa.planning.cem_ac import elites

    v = np.asarray(values, np.float32)
    return {"energies": v, "topk": np.stack([elites(x, topk) for x in v]),
            "actions": np.asarray(actions, np.float32)}


def test_compare_counts_elites_and_sees_through_a_common_offset() -> None:
    compare = import_tool("bench.world_half").compare
    ref = _trace([[1, 2, 3, 4], [1, 2, 3, 4]], 2, [0.5, 0.25])
    # Iteration 0: every value 5 higher (ranks unchanged); iteration 1: candidate 1 pushed past candidate 2.
    half = np.asarray([[6, 7, 8, 9], [1, 3.5, 3, 4]], np.float32)
    free = _trace([[6, 7, 8, 9], [1, 3.5, 3, 4]], 2, [0.5, 0.375])
    out = compare(ref, half, free, 2, "energies")
    lk, fr = out["lockstep"], out["free"]
    assert lk["value_max_rel_err"] == 5 / 4
    assert lk["value_max_rel_err_less_offset"] == 1.5 / 4  # the offset (5) is what iteration 0 adds
    assert (lk["elite_sets_differ"], lk["elites_swapped"], lk["elite_order_differs"]) == (1, 1, 1)
    assert lk["per_iteration"]["elite_sets_differ"] == [False, True]
    # f32's gap at the boundary (3 - 2) over the range of the error (1.5 - 0): below 1, a swap could happen.
    assert lk["gap_over_error_range_min"] == pytest.approx(1 / 1.5, rel=1e-3)
    assert (fr["first_elites_differ"], fr["elite_sets_differ"]) == (1, 1)
    assert not fr["actions_identical"] and fr["actions_max_abs_diff"] == 0.125


@pytest.mark.torch
def test_bench_world_half_smoke(tmp_path: Path) -> None:
    data = smoke_record("bench/world_half.py", tmp_path / "h.json", "--threads", "1")
    assert data["machine"]["simd"] and data["paths"]["default"] and data["benchmark"] == "world-half"
    assert data["held"]["jepa"] == data["paths"]["default"]
    cases = {c["case"]: c for c in data["cases"]}
    assert set(cases) == {"ac-bundle", "lewm-bundle", "ac-released", "lewm-released"}
    for name in ("ac-bundle", "lewm-bundle"):
        # The f32 file replays upstream's run: its elites in every iteration.
        assert cases[name]["f32"]["elites_match_upstream"]
    for c in cases.values():
        assert c["f32"]["rollout_equals_plan_values"]
        assert {("f16", "default"), ("bf16", "default")} <= {(h["ftype"], h["path"]) for h in c["half"]}
        for h in c["half"]:
            # A half file moves the values, a little (f16 rounds the weights only; bf16 more).
            err = h["lockstep"]["value_max_rel_err"]
            assert 0 < err < (1e-3 if h["ftype"] == "f16" else 2e-2), (c["case"], h["ftype"], err)
    for name in ("ac-bundle", "lewm-bundle"):
        # The bundles' top-k gaps are wider than any half error: the same elites, the same plan.
        for h in cases[name]["half"]:
            assert h["lockstep"]["elite_sets_differ"] == h["free"]["elite_sets_differ"] == 0
            assert h["free"]["f32_value_of_plan_ratio"] == 1.0
    text = import_tool("render_docs").render_world_half(data)
    assert "V-JEPA 2-AC bundle" in text and "A `--smoke` run" in text
