"""A model's replicas: one per device, each with its own workers and its batch budget.

`build_replicas` loads the model on every device asked for (skipping, with a log line, a device the
model does not fit), starts each replica's workers, then measures what is left for batches: on
CUDA the device's free memory once the weights and the workers' contexts are placed, on the CPU
a setting. The dispatcher turns bytes into its cost units (`budget_from_bytes`)."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import jepa

from .scheduler import CostModel
from .workers import WorkerPool

log = logging.getLogger("jepa_server")

# The share of a GPU's free memory batches may use: the rest is headroom for the allocator's
# fragmentation and whatever else shares the device.
GPU_MEMORY_SHARE = 0.8


@dataclass(frozen=True)
class Replica:
    """One device's copy of a model, and its workers."""

    device: str  # "cpu", "cuda:0", ...; a second replica on one device "cpu#2"
    workers: WorkerPool
    budget: float = math.inf  # cost units one batch may hold (scheduler.input_cost's units)
    weight: float | None = None  # overrides the measured speed in the ranking (every replica or none)


def activation_bytes(model: jepa.Model, tokens: int) -> float:
    """What one item of `tokens` tokens needs while its graph runs: a block's widest activations
    (the MLP's F, the residual and attention's D-wide tensors) and the attention scores (N² per
    head), float32. An estimate, for budgets: the engine's allocator reuses buffers between
    blocks, so the depth does not multiply it."""
    i = model.info
    d, f = int(i.embed_dim), int(i.ffn_dim) or 4 * int(i.embed_dim)
    return 4.0 * tokens * (f + 6 * d) + 4.0 * int(i.n_head) * tokens * tokens


def native_tokens(model: jepa.Model) -> int:
    """Tokens of one item of the model's native shape: a text model's longest text (max_seq_len;
    its texts are laid end to end, each attending to itself only, so a budget of these holds as
    many shorter texts' cost), an image or video model's tokens at its size and frame count."""
    if model.is_text:
        return int(model.info.max_seq_len)
    return model.n_tokens(max(1, int(model.info.n_frames)))


def budget_from_bytes(model: jepa.Model, n_bytes: float) -> float:
    """A batch budget in cost units from memory: as many items' cost as `n_bytes` holds items of the
    model's native shape (native_tokens)."""
    tokens = native_tokens(model)
    per_item = activation_bytes(model, tokens)
    return CostModel.of(model).item(tokens) * max(0.0, n_bytes) / per_item


# Errors that mean "this device cannot hold the model" (out of memory, a backend that fails):
# the device is skipped. Anything else (a bad file, a device that does not exist, a build without
# CUDA) is a configuration error and stops the server.
_SKIPPED = (jepa.ResourceLimitError, jepa.BackendError)


def build_replicas(
    path: str,
    devices: Sequence[str],
    workers: int,
    threads: int,
    max_batch: int,
    cpu_budget_bytes: float | None,
    *,
    weights: Mapping[str, float] | None = None,
    load: Callable[[str, str], jepa.Model] = jepa.Model,
    memory: Callable[[str], tuple[int, int]] = jepa.device_memory,
    warm: bool = True,
) -> list[Replica]:
    """The model at `path` on each of `devices` ("cpu", "cuda:N"), each with `workers` started
    workers of `threads` threads and contexts of `max_batch`, in the order given. A device named
    twice gets two replicas, the second named "cpu#2" (weights are keyed by these names).

    A device the model does not fit (the engine's ResourceLimitError or BackendError while loading
    it or warming its workers) is skipped with a warning; when none is left the last error is
    raised. The budget: on the CPU, `cpu_budget_bytes` of batch memory (None or 0: unbounded,
    max_batch alone); on CUDA, GPU_MEMORY_SHARE of the free memory measured after the weights and contexts
    are placed. `weights` (device -> weight, every device or none) overrides the measured speeds
    in the scheduler's ranking. `warm=False` starts the workers without their warm call (the
    server's --skip-smoke-test). Any other error stops the replicas already started, then is
    raised. Blocking (loads, warms): call it off the event loop. The caller owns the pools: stop
    them with `stop_replicas`."""
    replicas: list[Replica] = []
    last: jepa.JepaError | None = None
    for n, device in enumerate(devices):
        # A device named twice is two replicas on it: the second is "cpu#2" (names are unique).
        label = device if device not in devices[:n] else f"{device}#{list(devices[:n]).count(device) + 1}"
        pool: WorkerPool | None = None
        try:
            model = load(path, device)
            pool = WorkerPool(model, workers, threads, max_batch, label=label)
            pool.start(warm)
            budget = _budget(model, device, cpu_budget_bytes, memory)
        except _SKIPPED as exc:
            if pool is not None:
                pool.stop()
            log.warning("not serving %s on %s: %s", os.path.basename(path), device, exc.message)
            last = exc
            continue
        except BaseException:
            if pool is not None:
                pool.stop()
            stop_replicas(replicas)
            raise
        weight = None if weights is None else weights.get(label)
        replicas.append(Replica(label, pool, budget, weight))
        log.info("%s on %s: %d workers, batch budget %s", os.path.basename(path), label, workers,
                 "unbounded" if math.isinf(budget) else f"{budget:.3g}")
    if not replicas:
        if last is not None:
            raise last
        raise ValueError("no devices to serve on")
    return replicas


def stop_replicas(replicas: Sequence[Replica], timeout: float = 30.0) -> None:
    """Stop every replica's workers, waiting `timeout` seconds in all for graphs still running.
    Blocking: call it off the event loop."""
    deadline = time.monotonic() + timeout
    for r in replicas:
        r.workers.stop(max(0.0, deadline - time.monotonic()))


def _budget(model: jepa.Model, device: str, cpu_budget_bytes: float | None,
            memory: Callable[[str], tuple[int, int]]) -> float:
    if device == "cpu":
        # None or 0 (a setting's "off"): unbounded, max_batch alone.
        return budget_from_bytes(model, cpu_budget_bytes) if cpu_budget_bytes else math.inf
    free, _ = memory(device)
    return budget_from_bytes(model, GPU_MEMORY_SHARE * free)
