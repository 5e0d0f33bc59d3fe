"""The scheduler against static splits, on tools/sim_scheduler.py's virtual clock: the server's own
Scheduler class, deterministic and thread-free, a burst of photos and clips of 8 to 64 frames on two
devices 1:4 in speed. The converging queue must end the burst in under 0.85x the best static split's
time (even, or dealt by a guessed ratio), and the committed results file must be this run's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import import_tool

sim = import_tool("sim_scheduler")
RESULTS = Path(__file__).parent / "results" / "scheduler-sim.json"


@pytest.fixture(scope="module")
def result() -> dict:
    return sim.run()


def test_the_converging_queue_beats_the_best_static_split(result: dict) -> None:
    p = result["policies"]
    conv = p["converging"]["makespan_s"]
    best = min(p["static-even"]["makespan_s"], p["static-guess"]["makespan_s"])
    assert conv < 0.85 * best, (conv, best)
    assert result["ratio_vs_best_static"] == round(conv / best, 4)
    # Near the bound: the total cost over the summed speeds, which no schedule beats.
    assert result["ideal_makespan_s"] <= conv < 1.05 * result["ideal_makespan_s"]


def test_the_converging_queue_idles_neither_device(result: dict) -> None:
    span = result["policies"]["converging"]["makespan_s"]
    devices = result["policies"]["converging"]["devices"]
    for name, d in devices.items():
        assert d["idle_s"] == pytest.approx(span - d["busy_s"], abs=1e-3)
        assert d["idle_s"] < 0.05 * span, name
    # Fast from the expensive end, slow from the cheap end, serving about their speeds' shares.
    assert devices["cuda:0"]["ends"] == ["expensive"] and devices["cpu"]["ends"] == ["cheap"]
    assert devices["cuda:0"]["cost_share"] == pytest.approx(0.8, abs=0.03)
    # A static split leaves one device idle for a long time.
    even = result["policies"]["static-even"]["devices"]
    assert even["cuda:0"]["idle_s"] > 0.5 * result["policies"]["static-even"]["makespan_s"]


def test_no_static_guess_beats_the_converging_queue(result: dict) -> None:
    sweep = {g["ratio"]: g for g in result["static_by_guess"]}
    assert result["true_ratio"] in sweep and result["guessed_ratio"] in sweep
    assert all(g["converging_over_it"] < 1 for g in sweep.values())
    # The right guess is the best static split, and not one the converging queue has to be given.
    assert min(sweep.values(), key=lambda g: g["makespan_s"])["ratio"] == result["true_ratio"]


def test_every_item_is_served_once_whatever_the_arrival_order() -> None:
    # simulate() asserts it; the makespan does not depend on the order the burst arrived in.
    spans = {sim.run(seed)["policies"]["converging"]["makespan_s"] for seed in (1, 2, 3)}
    assert len(spans) == 1


def test_the_committed_results_are_this_simulation(result: dict) -> None:
    committed = json.loads(RESULTS.read_text())
    assert all(committed.get(k) for k in sim.RECORD)  # when and from which code
    fresh = {k: v for k, v in committed.items() if k not in sim.RECORD}
    assert fresh == result, "rerun: python tools/sim_scheduler.py"
