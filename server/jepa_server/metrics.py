"""Prometheus metrics, one registry per application (so two apps in one process never collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .settings import MAX_BATCH_SERVED

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "jepa_requests",
            "Requests answered, by endpoint and HTTP status.",
            ["endpoint", "status"],
            registry=r,
        )
        self.items = Counter("jepa_items", "Items (images, clips, videos) encoded.", registry=r)
        self.request_seconds = Histogram(
            "jepa_request_duration_seconds",
            "Time from a request's arrival to its answer.",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_seconds = Histogram(
            "jepa_queue_seconds",
            "Time an item waited between preprocessing and the start of its graph.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.inference_seconds = Histogram(
            "jepa_inference_seconds",
            "Time one graph (one batch) took on a worker.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        # One bucket per size: the histogram is the exact distribution of formed graphs.
        self.batch_size = Histogram(
            "jepa_batch_size",
            "Items per formed graph.",
            buckets=tuple(range(1, MAX_BATCH_SERVED + 1)),
            registry=r,
        )
        self.queue_depth = Gauge("jepa_queue_depth", "Items waiting for a worker.", registry=r)
        self.in_flight = Gauge("jepa_requests_in_flight", "Requests being answered.", registry=r)
        self.workers = Gauge("jepa_workers", "Worker threads, by state.", ["state"], registry=r)
        # Per device (a model replicated on several: the dispatcher's scheduler).
        self.device_items = Counter("jepa_device_items", "Items encoded, by device.", ["device"], registry=r)
        self.device_cost = Counter(
            "jepa_device_cost",
            "Work served, in the scheduler's cost units (encoder multiply-adds), by device.",
            ["device"],
            registry=r,
        )
        self.device_speed = Gauge(
            "jepa_device_speed",
            "The scheduler's speed estimate: cost units per second of one graph (EWMA), by device.",
            ["device"],
            registry=r,
        )
        self.retries = Counter(
            "jepa_retries",
            "Batches queued again for another device after failing on this one, by device.",
            ["device"],
            registry=r,
        )
        self.steals = Counter(
            "jepa_steals",
            "Batches taken back from a busy device before they started, by the device that ran them.",
            ["device"],
            registry=r,
        )
        # The registry (registry.py): loads, unloads and what is resident.
        self.model_events = Counter(
            "jepa_model_events",
            "Model residency events: loaded, load_failed, unloaded_idle, unloaded_lru.",
            ["event"],
            registry=r,
        )
        self.load_seconds = Histogram(
            "jepa_model_load_seconds",
            "Time a cold load took, smoke test included.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.models_resident = Gauge("jepa_models_resident", "Models loaded and serving.", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
