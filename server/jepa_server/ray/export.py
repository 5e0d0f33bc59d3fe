"""A replica's engine counters as Ray metrics, beside Ray Serve's own.

Each replica's jepa-server app keeps its Prometheus registry (jepa_requests_total, jepa_batch_size,
jepa_inference_seconds, ...). /metrics through Ray's proxy would answer for whichever replica the
request reached, so the registry is copied instead, every few seconds, into `ray.util.metrics`
gauges tagged with the replica: Ray's metrics agent on each node then exports them (as
ray_jepa_*) on the same endpoint as ray_serve_*, and one Prometheus scrape of the nodes sees every
replica. Counters and histogram buckets stay cumulative, so rate() and histogram_quantile() work
on them as on jepa-server's own /metrics."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

log = logging.getLogger("jepa_server.ray")

EXPORT_EVERY_S = 5.0


class GaugeLike(Protocol):
    def set(self, value: float, tags: dict[str, str]) -> None: ...


GaugeFactory = Callable[[str, str, tuple[str, ...]], GaugeLike]


def registry_samples(registry: CollectorRegistry) -> list[tuple[str, str, dict[str, str], float]]:
    """(sample name, help, labels, value) of every sample but the `_created` timestamps."""
    out = []
    for family in registry.collect():
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out.append((s.name, family.documentation, dict(s.labels), float(s.value)))
    return out


def _ray_gauge(name: str, description: str, tag_keys: tuple[str, ...]) -> GaugeLike:
    from ray.util.metrics import Gauge

    gauge: Any = Gauge(name, description=description, tag_keys=tag_keys)
    return gauge


class EngineMetricsExport:
    """Copies one registry into gauges named as its samples, tagged with `tags` (the replica)."""

    def __init__(
        self, registry: CollectorRegistry, tags: Mapping[str, str], gauge: GaugeFactory = _ray_gauge
    ) -> None:
        self._registry = registry
        self._tags = dict(tags)
        self._make = gauge
        self._gauges: dict[str, tuple[GaugeLike, tuple[str, ...]]] = {}

    def export_once(self) -> int:
        """Set every gauge from the registry now; returns the samples exported."""
        n = 0
        for name, doc, labels, value in registry_samples(self._registry):
            keys = tuple(sorted({*labels, *self._tags}))
            known = self._gauges.get(name)
            if known is None or known[1] != keys:
                # A family's label names never change; one gauge per sample name and label set.
                known = (self._make(name, doc, keys), keys)
                self._gauges[name] = known
            known[0].set(value, tags={**labels, **self._tags})
            n += 1
        return n

    async def run(self, every_s: float = EXPORT_EVERY_S) -> None:
        """Export until cancelled; an export that fails is logged and the next one tried."""
        while True:
            try:
                self.export_once()
            except Exception:
                log.exception("exporting the engine's metrics to Ray failed")
            await asyncio.sleep(every_s)
