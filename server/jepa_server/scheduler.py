"""The multi-device scheduler's core: a cost-ordered queue, and the policy that says which end of it
a device takes its next batch from. Pure and thread-free: the dispatcher drives it on the event
loop, the simulation (tools/sim_scheduler.py) on a virtual clock — the same class.

Every task has a cost (its encoder's multiply-adds, `input_cost`) and a batch key (tasks with equal
keys may share one graph). A free device takes the head task at its end of the queue and the
compatible tasks behind it, in arrival order, up to its budget (cost units) and max_batch items.

- The fastest device (by its measured speed: cost per second of its finished graphs, an EWMA; or
  by a weight, where every device has one) takes from the expensive end, the others from the cheap
  end, until the frontiers meet: the longest work goes where it ends soonest, and a slow device's
  last batch is a cheap one. Nothing is split in advance: a device takes work when it is free, so
  the shares follow the speeds as they are, not as configured.
- A slower device takes only as much as it can finish before the others would finish everything
  else (the tail rule): past that point its batch would only lengthen the makespan, so it waits.
- A batch handed to a busy device ahead moves to a free one when it would end sooner there
  (`sooner_elsewhere`, `move`: the dispatcher's work stealing).
- A device that fails a batch by its own fault rests a while (`device_failed`), so a broken device
  does not take and hand on every batch.
- A lone device has no frontier to meet: it takes the oldest task, in arrival order, as before.
- `max_age_s` (off by default) serves a task that has waited that long next, from any device, so
  the middle of the order cannot starve under sustained load.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

if TYPE_CHECKING:
    from jepa import Model

T = TypeVar("T")

End = Literal["expensive", "cheap", "oldest"]

# Speed estimates follow a device's recent graphs, a few graphs deep (the load on a shared machine
# changes; one odd graph does not swing the ranking).
EWMA_ALPHA = 0.3
# A device that fails (its own failure, not a refused input) rests this long before it takes work
# again, doubling per consecutive failure up to REST_MAX_S: a broken device must not take, fail and
# hand on every batch. Only while another device can serve.
REST_S = 1.0
REST_MAX_S = 60.0


# -- cost ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostModel:
    """An encoder's multiply-adds by token count: per layer and token, the four attention
    projections (4·D²), the MLP (2·D·F) and attention itself (2·N·D, scores and mix). Only ratios
    matter to the scheduler, so the constant factors are left out."""

    n_layer: int
    embed_dim: int
    ffn_dim: int

    @classmethod
    def of(cls, model: Model) -> CostModel:
        i = model.info
        return cls(int(i.n_layer), int(i.embed_dim), int(i.ffn_dim) or 4 * int(i.embed_dim))

    def per_token(self, tokens: int) -> float:
        d = self.embed_dim
        return float(self.n_layer * (4 * d * d + 2 * d * self.ffn_dim + 2 * tokens * d))

    def item(self, tokens: int) -> float:
        """The cost of one item of `tokens` tokens."""
        return tokens * self.per_token(tokens)


def input_cost(model: Model, shape: Sequence[int]) -> float:
    """The cost of one prepared input [C, T, H, W]: its tokens (frames included, by the model's
    tubelet) times the model's cost per token."""
    _, t, h, w = shape[-4:]
    return CostModel.of(model).item(model.n_tokens(t, h, w))


# -- the queue ----------------------------------------------------------------------------------


@dataclass(eq=False)
class Entry(Generic[T]):
    item: T
    cost: float
    key: Hashable  # equal keys may share a graph
    seq: int  # arrival order
    enqueued: float
    avoid: frozenset[str] = frozenset()  # devices it must not run on (it failed there)


@dataclass(frozen=True)
class _Alone:
    """The key of a task that runs alone: equal to nothing else."""

    seq: int


@dataclass(frozen=True)
class Selection(Generic[T]):
    entries: list[Entry[T]]
    full: bool  # it cannot grow: max items, its budget, or a task that runs alone


def is_full(entries: Sequence[Entry[T]], budget: float, max_items: int) -> bool:
    """Whether a batch cannot grow: max_items, one more task over its budget, or a task that runs
    alone."""
    if not entries:
        return False
    head = entries[0]
    alone = isinstance(head.key, _Alone)
    return alone or len(entries) >= max_items or (len(entries) + 1) * head.cost > budget


class CostQueue(Generic[T]):
    """Tasks in buckets of one key and one cost, each bucket in arrival order. A batch is always one
    bucket's tasks: the head bucket of the asked-for end, its first tasks the device may run."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[Hashable, float], list[Entry[T]]] = {}
        self._seq = 0
        self._n = 0
        self._cost = 0.0

    def __len__(self) -> int:
        return self._n

    @property
    def total_cost(self) -> float:
        return self._cost

    def __iter__(self) -> Iterator[Entry[T]]:
        for bucket in self._buckets.values():
            yield from bucket

    def push(self, item: T, cost: float, key: Hashable | None = None, now: float = 0.0,
             avoid: frozenset[str] = frozenset()) -> Entry[T]:
        """Queue a task; key None runs alone."""
        self._seq += 1
        entry = Entry(item, float(cost), _Alone(self._seq) if key is None else key, self._seq, now, avoid)
        self._insert(entry)
        return entry

    def requeue(self, entry: Entry[T], avoid: str) -> None:
        """Put a taken task back in its place (its arrival order), never again on device `avoid`."""
        self._insert(replace(entry, avoid=entry.avoid | {avoid}))

    def _insert(self, entry: Entry[T]) -> None:
        bucket = self._buckets.setdefault((entry.key, entry.cost), [])
        bisect.insort(bucket, entry, key=lambda e: e.seq)
        self._n += 1
        self._cost += entry.cost

    def remove(self, entries: Sequence[Entry[T]]) -> None:
        gone = {id(e) for e in entries}
        for bk in {(e.key, e.cost) for e in entries}:
            bucket = self._buckets[bk]
            kept = [e for e in bucket if id(e) not in gone]
            self._n -= len(bucket) - len(kept)
            self._cost -= (len(bucket) - len(kept)) * bk[1]
            if kept:
                self._buckets[bk] = kept
            else:
                del self._buckets[bk]
        if self._n == 0:
            self._cost = 0.0  # no float drift left behind an empty queue

    def discard(self, drop: Callable[[T], bool]) -> int:
        """Remove the tasks whose item `drop` says are gone (abandoned by their request)."""
        gone = [e for e in self if drop(e.item)]
        if gone:
            self.remove(gone)
        return len(gone)

    def oldest(self, device: str | None = None) -> Entry[T] | None:
        heads = [e for e in (self._first(b, device) for b in self._buckets.values()) if e is not None]
        return min(heads, key=lambda e: e.seq, default=None)

    def select(self, end: End, budget: float, max_items: int, device: str | None = None) -> Selection[T]:
        """The batch `device` would take from `end` (nothing is removed): the head bucket's first
        tasks, up to `budget` and `max_items`. The head task is taken even over the budget: it has
        to run somewhere, alone (the engine's own caps refuse what cannot fit)."""
        heads = [(b, e) for b in self._buckets.values() if (e := self._first(b, device)) is not None]
        if not heads:
            return Selection([], False)
        if end == "expensive":
            bucket, _ = max(heads, key=lambda h: (h[1].cost, -h[1].seq))
        elif end == "cheap":
            bucket, _ = min(heads, key=lambda h: (h[1].cost, h[1].seq))
        else:
            bucket, _ = min(heads, key=lambda h: h[1].seq)
        return self._fill(bucket, [], budget, max_items, device)

    def compatible(self, batch: Sequence[Entry[T]], budget: float, max_items: int,
                   device: str | None = None) -> Selection[T]:
        """`batch` grown by the tasks compatible with it still queued (nothing is removed)."""
        head = batch[0]
        bucket = self._buckets.get((head.key, head.cost), [])
        return self._fill(bucket, list(batch), budget, max_items, device)

    @staticmethod
    def _fill(bucket: list[Entry[T]], chosen: list[Entry[T]], budget: float, max_items: int,
              device: str | None) -> Selection[T]:
        # One bucket, one cost: a batch of k tasks costs k times the head's.
        for e in bucket:
            if device in e.avoid:
                continue
            if chosen and (len(chosen) >= max_items or (len(chosen) + 1) * e.cost > budget):
                break
            chosen.append(e)
        return Selection(chosen, is_full(chosen, budget, max_items))

    @staticmethod
    def _first(bucket: list[Entry[T]], device: str | None) -> Entry[T] | None:
        return next((e for e in bucket if device not in e.avoid), None)


# -- the policy ---------------------------------------------------------------------------------


def _is_cpu(name: str) -> bool:
    """A CPU replica's name: "cpu", or a label that starts so ("cpu#2")."""
    return name.startswith("cpu")


@dataclass(frozen=True)
class DeviceSpec:
    name: str  # "cpu", "cuda:0", ...
    budget: float = math.inf  # cost units one batch may hold
    slots: int = 1  # graphs it runs at once (its workers)
    weight: float | None = None  # overrides the measured speed in the ranking, if every device has one


@dataclass(frozen=True)
class Batch(Generic[T]):
    id: int
    device: str
    entries: tuple[Entry[T], ...]
    end: End

    @property
    def cost(self) -> float:
        return sum(e.cost for e in self.entries)

    def __len__(self) -> int:
        return len(self.entries)


@dataclass
class DeviceState:
    spec: DeviceSpec
    speed: float | None = None  # cost per second of one graph (EWMA), None until one finished
    running: dict[int, tuple[float, float]] = field(default_factory=dict)  # batch id -> (cost, start)
    batches: int = 0
    items: int = 0
    cost: float = 0.0  # served (finished without error)
    busy_s: float = 0.0  # graph-seconds spent
    failures: int = 0  # consecutive device failures
    rests_until: float = 0.0  # takes no work before this time (after a failure)


class Scheduler(Generic[T]):
    def __init__(self, devices: Sequence[DeviceSpec], max_batch: int, *, alpha: float = EWMA_ALPHA,
                 max_age_s: float | None = None) -> None:
        if not devices:
            raise ValueError("a scheduler needs at least one device")
        names = [d.name for d in devices]
        if len(set(names)) != len(names):
            raise ValueError(f"device names must be unique: {names}")
        weights = [d.weight for d in devices]
        if any(w is not None for w in weights) and not all(w is not None and w > 0 for w in weights):
            raise ValueError("a weight override needs a weight > 0 on every device")
        self.devices = {d.name: DeviceState(d) for d in devices}
        self.max_batch = max_batch
        self.alpha = alpha
        self.max_age_s = max_age_s
        self.queue: CostQueue[T] = CostQueue()
        self._next_batch = 0
        self._weighted = all(w is not None for w in weights)

    # -- ranking

    def ranking(self) -> list[str]:
        """Device names, fastest first: by weight where every device has one; else by measured speed
        once every device has one; before that an accelerator before the CPU, and of two alike the
        one with the larger budget (more free memory is usually the bigger device); then in the
        order given."""
        order = list(self.devices)
        states = self.devices.values()
        rate: dict[str, tuple[float, float]]
        if self._weighted:
            rate = {d.spec.name: (float(d.spec.weight or 0.0), 0.0) for d in states}
        elif all(d.speed is not None for d in states):
            rate = {d.spec.name: (float(d.speed or 0.0), 0.0) for d in states}
        else:
            rate = {d.spec.name: (float(not _is_cpu(d.spec.name)), d.spec.budget) for d in states}
        return sorted(order, key=lambda n: (-rate[n][0], -rate[n][1], order.index(n)))

    def end_for(self, device: str, now: float = 0.0) -> End:
        if len(self.devices) == 1:
            return "oldest"
        if self.max_age_s is not None:
            old = self.queue.oldest(device)
            if old is not None and now - old.enqueued >= self.max_age_s:
                return "oldest"
        return "expensive" if self.ranking()[0] == device else "cheap"

    # -- the queue side

    def push(self, item: T, cost: float, key: Hashable | None = None, now: float = 0.0) -> Entry[T]:
        return self.queue.push(item, cost, key, now)

    def take(self, device: str, now: float, *, full_only: bool = False) -> Batch[T] | None:
        """The batch `device` runs next, removed from the queue and counted as running on it; None
        when there is nothing for it (or, full_only, nothing full; or the tail rule says wait)."""
        d = self.devices[device]
        if self.resting(device, now):
            return None
        end = self.end_for(device, now)
        sel = self.queue.select(end, d.spec.budget, self.max_batch, device)
        if not sel.entries or (full_only and not sel.full):
            return None
        entries = self._within_tail(d, sel.entries, now)
        if not entries or (full_only and len(entries) < len(sel.entries)):
            return None
        return self._start(d, entries, end, now)

    def top_up(self, batch: Batch[T], now: float) -> Batch[T]:
        """`batch` grown by compatible tasks that arrived since it was taken (max_wait), within its
        device's budget and max_batch."""
        d = self.devices[batch.device]
        sel = self.queue.compatible(list(batch.entries), d.spec.budget, self.max_batch, batch.device)
        more = sel.entries[len(batch.entries):]
        if not more:
            return batch
        self.queue.remove(more)
        grown = replace(batch, entries=(*batch.entries, *more))
        _, started = d.running[batch.id]
        d.running[batch.id] = (grown.cost, started)
        return grown

    def is_full(self, batch: Batch[T]) -> bool:
        return is_full(batch.entries, self.devices[batch.device].spec.budget, self.max_batch)

    def finish(self, batch: Batch[T], seconds: float, ok: bool = True) -> None:
        """A batch ended on its device after `seconds` of graph time; a finished one updates the
        device's speed."""
        d = self.devices[batch.device]
        d.running.pop(batch.id, None)
        d.busy_s += seconds
        if not ok:
            return
        d.failures = 0
        d.batches += 1
        d.items += len(batch)
        d.cost += batch.cost
        if seconds > 0:
            sample = batch.cost / seconds
            d.speed = sample if d.speed is None else (1 - self.alpha) * d.speed + self.alpha * sample

    def device_failed(self, device: str, now: float) -> None:
        """A batch failed on `device` by the device's own fault: it rests REST_S, doubling per
        consecutive failure up to REST_MAX_S (a success ends the streak)."""
        d = self.devices[device]
        d.failures += 1
        d.rests_until = now + min(REST_MAX_S, REST_S * 2 ** (d.failures - 1))

    def resting(self, device: str, now: float) -> bool:
        """Whether `device` sits out now: after a failure, and only while some other device does
        not (when every device rests, none does: the work must go somewhere)."""
        if now >= self.devices[device].rests_until:
            return False
        return any(now >= o.rests_until for o in self.devices.values())

    def wakes_at(self, now: float) -> float | None:
        """When the next resting device may take work again (None: none rests)."""
        return min((d.rests_until for d in self.devices.values() if d.rests_until > now), default=None)

    def sooner_elsewhere(self, batch: Batch[T], device: str, now: float, waits_for: float) -> bool:
        """Whether `batch`, handed to its device ahead and not started there, would end sooner on
        `device` (which has a free worker now) than behind the `waits_for` cost units of work its
        own device has to do first. Unmeasured speeds: yes (a free worker beats a queue)."""
        home, free = self.devices[batch.device], self.devices[device]
        if device in batch.entries[0].avoid:
            return False
        if home.speed is None or free.speed is None:
            return True
        return batch.cost / free.speed < (waits_for / home.spec.slots + batch.cost) / home.speed

    def move(self, batch: Batch[T], device: str, now: float) -> Batch[T]:
        """`batch`, taken back from its device before it started, now running on `device`."""
        self.devices[batch.device].running.pop(batch.id, None)
        moved = replace(batch, device=device)
        self.devices[device].running[moved.id] = (moved.cost, now)
        return moved

    def remaining(self, batch: Batch[T], now: float) -> float:
        """The cost of `batch` its device has still to do, by its speed since it was taken."""
        d = self.devices[batch.device]
        cost, start = d.running.get(batch.id, (batch.cost, now))
        return max(0.0, cost - (now - start) * float(d.speed or 0.0))

    def retry(self, batch: Batch[T], entries: Sequence[Entry[T]] | None = None) -> bool:
        """Queue a failed batch's tasks again (all, or `entries`) for any device but the one they
        failed on, once: False when a task has already been retried, or no other device is left."""
        todo = list(batch.entries if entries is None else entries)
        others = set(self.devices) - {batch.device}
        if any(e.avoid for e in todo) or not others:
            return False
        for e in todo:
            self.queue.requeue(e, batch.device)
        return True

    # -- internals

    def _start(self, d: DeviceState, entries: list[Entry[T]], end: End, now: float) -> Batch[T]:
        self.queue.remove(entries)
        self._next_batch += 1
        batch = Batch(self._next_batch, d.spec.name, tuple(entries), end)
        d.running[batch.id] = (batch.cost, now)
        return batch

    def _within_tail(self, d: DeviceState, entries: list[Entry[T]], now: float) -> list[Entry[T]]:
        """The tail rule: a device that is not the fastest keeps only the first tasks it would end
        no later than the other devices would end everything else (what runs on them, the rest of
        the queue). Needs measured speeds; a task that must avoid every other device is always
        kept."""
        if self.ranking()[0] == d.spec.name or d.speed is None:
            return entries
        others = [o for o in self.devices.values() if o is not d and o.spec.name not in entries[0].avoid]
        if not others or any(o.speed is None for o in others):
            return entries
        rate = sum(float(o.speed or 0.0) * o.spec.slots for o in others)
        backlog = sum(max(0.0, cost - (now - start) * float(o.speed or 0.0))
                      for o in others for cost, start in o.running.values())
        everything = backlog + self.queue.total_cost
        kept: list[Entry[T]] = []
        taken = 0.0
        for e in entries:
            mine = taken + e.cost
            if mine / d.speed > (everything - mine) / rate:
                break
            kept.append(e)
            taken = mine
        return kept

    def idle(self) -> bool:
        return not self.queue and not any(d.running for d in self.devices.values())
