"""The scheduler's core (jepa_server.scheduler): the cost-ordered queue's ends, budgets and batch
keys, the speed estimates and the ranking they make, the tail rule, retries and the cost of an
input. Pure: no threads, no clock, no model but in the cost test."""

from __future__ import annotations

import math

import pytest

import jepa
from jepa_server.scheduler import CostModel, CostQueue, DeviceSpec, Scheduler, input_cost


def _queue(*tasks: tuple[str, float, object]) -> CostQueue[str]:
    q: CostQueue[str] = CostQueue()
    for name, cost, key in tasks:
        q.push(name, cost, key)
    return q


def _names(sel: object) -> list[str]:
    return [e.item for e in sel.entries]  # type: ignore[attr-defined]


MIXED = (("a1", 1, "img"), ("c1", 9, "clip"), ("a2", 1, "img"), ("b1", 4, "mid"), ("c2", 9, "clip"),
         ("a3", 1, "img"), ("c3", 9, "clip"))


@pytest.mark.parametrize(("end", "batch"), [
    ("expensive", ["c1", "c2", "c3"]),  # the costliest bucket, in arrival order
    ("cheap", ["a1", "a2", "a3"]),
    ("oldest", ["a1", "a2", "a3"]),  # the first arrived, and its compatible tasks behind others
])
def test_each_end_takes_its_head_bucket_in_arrival_order(end: str, batch: list[str]) -> None:
    q = _queue(*MIXED)
    assert _names(q.select(end, math.inf, 8)) == batch  # type: ignore[arg-type]
    assert len(q) == 7  # select removes nothing


def test_a_batch_holds_one_key_up_to_max_items_and_the_budget() -> None:
    q = _queue(*MIXED)
    assert _names(q.select("expensive", math.inf, 2)) == ["c1", "c2"]
    sel = q.select("expensive", 20, 8)  # two clips fit 20, a third would not
    assert _names(sel) == ["c1", "c2"] and sel.full
    sel = q.select("cheap", 20, 8)
    assert _names(sel) == ["a1", "a2", "a3"] and not sel.full  # it could still grow
    over = q.select("expensive", 5, 8)  # the head runs even over the budget, alone
    assert _names(over) == ["c1"] and over.full


def test_tasks_without_a_key_run_alone_and_removal_keeps_the_totals() -> None:
    q = _queue(("w1", 3, None), ("w2", 3, None), ("a1", 1, "img"))
    sel = q.select("expensive", math.inf, 8)
    assert _names(sel) == ["w1"] and sel.full
    q.remove(sel.entries)
    assert len(q) == 2 and q.total_cost == 4
    assert q.discard(lambda item: item == "a1") == 1
    assert [e.item for e in q] == ["w2"] and q.total_cost == 3


def _sched(*specs: DeviceSpec, max_batch: int = 8, **kw: object) -> Scheduler[str]:
    return Scheduler(list(specs), max_batch, **kw)  # type: ignore[arg-type]


def test_ranking_by_budget_until_measured_then_by_speed_or_by_weight() -> None:
    s = _sched(DeviceSpec("cpu", math.inf), DeviceSpec("cuda:1", 20), DeviceSpec("cuda:0", 40))
    # The prior: an accelerator first (even against an unbounded CPU), then the bigger budget.
    assert s.ranking() == ["cuda:0", "cuda:1", "cpu"]
    s = _sched(DeviceSpec("cpu", 10), DeviceSpec("cuda:0", 40))
    assert s.end_for("cuda:0") == "expensive" and s.end_for("cpu") == "cheap"
    for name, seconds in (("cpu", 1.0), ("cuda:0", 8.0)):  # measured: the CPU is the faster
        s.push(name, 4, "k")
        batch = s.take(name, 0.0)
        assert batch is not None
        s.finish(batch, seconds)
    assert s.devices["cpu"].speed == 4 and s.devices["cuda:0"].speed == 0.5
    assert s.ranking() == ["cpu", "cuda:0"] and s.end_for("cpu") == "expensive"
    weighted = _sched(DeviceSpec("cpu", 10, weight=3), DeviceSpec("cuda:0", 40, weight=1))
    assert weighted.ranking() == ["cpu", "cuda:0"]
    with pytest.raises(ValueError, match="every device"):
        _sched(DeviceSpec("cpu", weight=3), DeviceSpec("cuda:0"))
    with pytest.raises(ValueError, match="unique"):
        _sched(DeviceSpec("cpu"), DeviceSpec("cpu"))


def test_speed_is_an_ewma_of_cost_per_second() -> None:
    s = _sched(DeviceSpec("cpu"), alpha=0.25)
    for cost, seconds in ((8, 2.0), (8, 1.0)):
        s.push("x", cost, "k")
        batch = s.take("cpu", 0.0)
        assert batch is not None
        s.finish(batch, seconds)
    st = s.devices["cpu"]
    assert st.speed == pytest.approx(0.75 * 4 + 0.25 * 8)
    assert (st.batches, st.items, st.cost, st.busy_s) == (2, 2, 16, 3.0)
    s.push("y", 8, "k")
    batch = s.take("cpu", 0.0)
    assert batch is not None
    s.finish(batch, 5.0, ok=False)  # a failed graph is time spent, not speed measured
    assert st.speed == pytest.approx(5.0) and st.cost == 16 and st.busy_s == 8.0


def test_a_lone_device_serves_in_arrival_order_and_old_tasks_go_first() -> None:
    s = _sched(DeviceSpec("cpu"))
    for name, cost, key in MIXED:
        s.push(name, cost, key)
    batch = s.take("cpu", 0.0)
    assert batch is not None and [e.item for e in batch.entries] == ["a1", "a2", "a3"]
    two = _sched(DeviceSpec("cpu", 1), DeviceSpec("cuda:0", 2), max_age_s=5.0)
    two.push("old", 1, "img", now=0.0)
    two.push("new", 9, "clip", now=4.0)
    assert two.end_for("cuda:0", now=4.0) == "expensive"
    assert two.end_for("cuda:0", now=5.0) == "oldest"  # "old" has waited max_age_s


def _measured(slow: float, fast: float) -> Scheduler[str]:
    """A cpu at `slow` and a cuda:0 at `fast` cost per second, both measured."""
    s = _sched(DeviceSpec("cpu", 100), DeviceSpec("cuda:0", 100))
    for name, speed in (("cpu", slow), ("cuda:0", fast)):
        s.push("probe", speed, "probe")
        batch = s.take(name, 0.0)
        assert batch is not None
        s.finish(batch, 1.0)
    return s


def test_the_tail_rule_keeps_a_slow_device_from_lengthening_the_makespan() -> None:
    s = _measured(1.0, 4.0)
    s.push("last", 4, "img")
    assert s.take("cpu", 0.0) is None  # 4 s on the CPU, 1 s on the GPU: it waits
    for i in range(9):
        s.push(f"more{i}", 4, "img")
    # 40 cost in all: the CPU keeps what it ends before the GPU ends the rest (8 / 1 <= 32 / 4).
    batch = s.take("cpu", 0.0)
    assert batch is not None and len(batch) == 2
    s.finish(batch, 8.0)  # at its measured speed
    # What runs on the GPU counts: with a 36-cost graph just started there, the CPU takes more
    # (3 x 4 / 1 <= (36 + 28 - 12) / 4).
    s.push("big", 36, "clip")
    gpu = s.take("cuda:0", 0.0)
    assert gpu is not None and gpu.cost == 36
    batch = s.take("cpu", 0.0)
    assert batch is not None and len(batch) == 3
    assert s.take("cuda:0", 0.0) is not None  # the fastest never waits


def test_a_failed_batch_is_retried_once_on_another_device() -> None:
    s = _sched(DeviceSpec("cpu", 30), DeviceSpec("cuda:0", 100))
    for name, cost, key in MIXED:
        s.push(name, cost, key)
    batch = s.take("cuda:0", 0.0)
    assert batch is not None and [e.item for e in batch.entries] == ["c1", "c2", "c3"]
    s.finish(batch, 0.1, ok=False)
    assert s.retry(batch)
    other = s.take("cuda:0", 0.0)  # the clips now avoid the GPU: its next costliest is the mid one
    assert other is not None and [e.item for e in other.entries] == ["b1"]
    cheap = s.take("cpu", 0.0)
    assert cheap is not None and [e.item for e in cheap.entries] == ["a1", "a2", "a3"]
    clips = s.take("cpu", 0.0)
    assert clips is not None and [e.item for e in clips.entries] == ["c1", "c2", "c3"]  # in order
    assert not s.retry(clips)  # once only
    lone = _sched(DeviceSpec("cpu"))
    lone.push("x", 1, "k")
    b = lone.take("cpu", 0.0)
    assert b is not None and not lone.retry(b)  # no other device to retry on


def test_top_up_grows_a_batch_within_its_budget() -> None:
    s = _sched(DeviceSpec("cpu", 3), max_batch=8)
    s.push("a1", 1, "img")
    batch = s.take("cpu", 0.0)
    assert batch is not None and not s.is_full(batch)
    for name in ("b", "a2", "a3", "a4"):
        s.push(name, 2 if name == "b" else 1, "mid" if name == "b" else "img")
    grown = s.top_up(batch, 0.0)
    assert [e.item for e in grown.entries] == ["a1", "a2", "a3"] and s.is_full(grown)
    assert s.devices["cpu"].running[grown.id][0] == 3
    assert [e.item for e in s.queue] == ["b", "a4"]


def test_input_cost_counts_tokens_and_frames(tiny_vit_path: str, tiny_vjepa2_encoder_path: str) -> None:
    vit = jepa.Model(tiny_vit_path)
    i = vit.info
    m = CostModel.of(vit)
    assert (m.n_layer, m.embed_dim) == (i.n_layer, i.embed_dim)
    n = vit.n_tokens(1)
    assert input_cost(vit, (3, 1, i.img_size, i.img_size)) == n * m.per_token(n)
    video = jepa.Model(tiny_vjepa2_encoder_path)
    size = video.info.img_size
    short, long = (input_cost(video, (3, f, size, size)) for f in (2, 8))
    assert long > 4 * short  # 4x the tokens, and attention grows with them


def test_a_batch_waiting_ahead_moves_to_a_free_device_only_when_it_ends_sooner_there() -> None:
    s = _measured(1.0, 4.0)  # cpu 1, cuda:0 4 cost per second
    s.push("x", 8, "img")
    batch = s.take("cuda:0", 0.0)  # handed to the GPU ahead, behind work of its own
    assert batch is not None
    # On the GPU it ends after (waits_for + 8) / 4 s; on the CPU after 8 s.
    assert not s.sooner_elsewhere(batch, "cpu", 0.0, waits_for=16)  # 6 s there, 8 s here
    assert s.sooner_elsewhere(batch, "cpu", 0.0, waits_for=28)  # 9 s there
    moved = s.move(batch, "cpu", 1.0)
    assert moved.device == "cpu" and moved.id == batch.id
    assert batch.id not in s.devices["cuda:0"].running and s.devices["cpu"].running[batch.id] == (8, 1.0)
    assert s.remaining(moved, 3.0) == 6  # 2 s at 1 cost per second
    unmeasured = _sched(DeviceSpec("cpu"), DeviceSpec("cuda:0"))
    unmeasured.push("y", 1, "img")
    b = unmeasured.take("cuda:0", 0.0)
    assert b is not None and unmeasured.sooner_elsewhere(b, "cpu", 0.0, 0.0)  # a free worker wins


def test_a_failing_device_rests_doubling_while_another_serves() -> None:
    s = _sched(DeviceSpec("cpu", 10), DeviceSpec("cuda:0", 40))
    for i in range(4):
        s.push(f"x{i}", 1, "img")
    s.device_failed("cuda:0", 10.0)
    assert s.resting("cuda:0", 10.5) and s.take("cuda:0", 10.5) is None
    assert s.wakes_at(10.5) == 11.0
    assert not s.resting("cuda:0", 11.0) and not s.resting("cpu", 10.5)
    s.device_failed("cuda:0", 11.0)  # a second failure in a row: twice as long
    assert s.resting("cuda:0", 12.9) and not s.resting("cuda:0", 13.0)
    s.device_failed("cpu", 12.0)  # every device resting: none does, the work must go somewhere
    assert not s.resting("cuda:0", 12.5) and not s.resting("cpu", 12.5)
    batch = s.take("cuda:0", 20.0)
    assert batch is not None
    s.finish(batch, 1.0)  # a success ends the streak: the next failure rests 1 s again
    s.device_failed("cuda:0", 30.0)
    assert s.wakes_at(30.0) == 31.0
    for _ in range(12):
        s.device_failed("cuda:0", 40.0)
    assert s.wakes_at(40.0) == 100.0  # at most REST_MAX_S
    lone = _sched(DeviceSpec("cpu"))
    lone.device_failed("cpu", 0.0)
    assert not lone.resting("cpu", 0.5)  # with nobody else to serve, it never rests
