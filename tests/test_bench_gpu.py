"""tools/bench/gpu.py --smoke on the CPU: the GPU benchmark's code (torch and jepa on one device, the
same weights, interleaved rounds, errors against torch f32; the world models' peers on the same device)
runs end to end here, so it cannot rot between the sessions that have a GPU. .ci/gpu_check.sh itself
is tests/test_gpu_check.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import smoke_record

VARIANTS = {"torch-f32", "torch-f16", "torch-bf16", "jepa-f32", "jepa-f16", "jepa-bf16"}


@pytest.mark.transformers
@pytest.mark.slow
def test_bench_gpu_smoke_on_cpu(tmp_path: Path) -> None:
    data = smoke_record("bench/gpu.py", tmp_path / "g.json", "--device", "cpu")
    assert data["device"] == "cpu" and data["smoke"] and data["gpu"] is None
    assert data["benchmark"] == "bench-gpu" and {"jepa", "ggml", "engine", "torch"} <= set(data["versions"])
    assert data["errors"] == {} and data["skipped"] == [] and not data["budget_exhausted"]
    cells = {(c["model"], c["batch"]) for c in data["cells"]}
    assert cells == {("vit-tiny", 1), ("vit-tiny", 2), ("vjepa2-tiny", 1)}
    for c in data["cells"]:
        assert set(c["ms_per_item"]) == VARIANTS and c["dropped"] == {}
        assert all(v > 0 for v in c["ms_per_item"].values())
        assert set(c["ratio_torch_over_jepa"]) == {"f32", "f16", "bf16"}
        err = c["max_rel_error_vs_torch_f32"]
        assert err["jepa-f32"] < 1e-4 and err["jepa-f16"] < 1e-2 and err["jepa-bf16"] < 5e-2
    world = {c["cell"]: c for c in data["world_cells"]}
    assert set(world) == {"ac_step", "lewm_plan"}
    ac, lewm = world["ac_step"], world["lewm_plan"]
    assert set(ac["ms"]) == {"torch-f32", "torch-bf16", "jepa-f32", "jepa-bf16"} and ac["dropped"] == {}
    assert ac["max_rel_error_vs_torch_f32"]["jepa-f32"] < 1e-4
    # Both plan on the solver's own draws (replayed), so the plans agree.
    assert set(lewm["ms"]) == {"upstream-f32", "jepa-f32", "jepa-bf16"}
    assert lewm["plan_actions_max_rel_err"]["jepa-f32"] < 1e-3


def test_a_budget_too_small_skips_cells_and_says_so(tmp_path: Path) -> None:
    data = smoke_record("bench/gpu.py", tmp_path / "g.json", "--device", "cpu", "--budget-s", "0")
    assert data["cells"] == [] and data["world_cells"] == [] and data["budget_exhausted"]
    assert data["skipped"] == ["encoder vit-tiny b1", "encoder vit-tiny b2", "encoder vjepa2-tiny b1",
                               "ac_step 4", "lewm_plan lewm"]
