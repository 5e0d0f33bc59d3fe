"""Prometheus metrics, one registry per application (so two apps in one process never collide)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .settings import MAX_BATCH_SERVED

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

CONTENT_TYPE = CONTENT_TYPE_LATEST
_M = TypeVar("_M", Counter, Gauge)


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
        # Everything a model's dispatcher counts carries the model's id: a server holds several.
        self.items = Counter(
            "jepa_items", "Items (images, clips, videos, texts) encoded.", ["model"], registry=r
        )

        def latency(name: str, doc: str, labels: list[str]) -> Histogram:
            return Histogram(name, doc, labels, buckets=_LATENCY_BUCKETS, registry=r)

        self.request_seconds = latency(
            "jepa_request_duration_seconds", "Time from a request's arrival to its answer.", ["endpoint"]
        )
        self.queue_seconds = latency(
            "jepa_queue_seconds", "Time an item waited between preprocessing and the start of its graph.",
            ["model"],
        )
        self.inference_seconds = latency(
            "jepa_inference_seconds", "Time one graph (one batch) took on a worker.", ["model"]
        )
        # One bucket per size: the histogram is the exact distribution of formed graphs.
        self.batch_size = Histogram(
            "jepa_batch_size",
            "Items per formed graph.",
            buckets=tuple(range(1, MAX_BATCH_SERVED + 1)),
            labelnames=["model"],
            registry=r,
        )
        self.queue_depth = Gauge("jepa_queue_depth", "Items waiting for a worker.", ["model"], registry=r)
        self.in_flight = Gauge("jepa_requests_in_flight", "Requests being answered.", registry=r)
        self.workers = Gauge("jepa_workers", "Worker threads, by state.", ["model", "state"], registry=r)
        # Per device (a model replicated on several: the dispatcher's scheduler), each by model and device.
        # One declaration per metric: the rows share a shape on purpose (`duplicates` pairs them).
        def per_device(kind: type[_M], name: str, doc: str) -> _M:
            return kind(name, doc, ["model", "device"], registry=r)

        self.device_items = per_device(Counter, "jepa_device_items", "Items encoded, by device.")
        self.device_cost = per_device(
            Counter, "jepa_device_cost",
            "Work served, in the scheduler's cost units (encoder multiply-adds), by device.",
        )
        self.device_speed = per_device(
            Gauge, "jepa_device_speed",
            "The scheduler's speed estimate: cost units per second of one graph (EWMA), by device.",
        )
        self.retries = per_device(
            Counter, "jepa_retries",
            "Batches queued again for another device after failing on this one, by device.",
        )
        self.steals = per_device(
            Counter, "jepa_steals",
            "Batches taken back from a busy device before they started, by the device that ran them.",
        )
        # The registry (registry.py): loads, unloads and what is resident.
        self.model_events = Counter(
            "jepa_model_events",
            "Model residency events: loaded, load_failed, unloaded_idle, unloaded_lru, "
            "unloaded_file_changed.",
            ["model", "event"],
            registry=r,
        )
        self.load_seconds = Histogram(
            "jepa_model_load_seconds",
            "Time a cold load took, smoke test included.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.models_resident = Gauge("jepa_models_resident", "Models loaded and serving.", registry=r)
        # A text model's traffic (texts are counted in jepa_items): real tokens, and truncations.
        self.text_tokens = Counter(
            "jepa_text_tokens", "Real tokens of the texts encoded (special tokens included).", ["model"],
            registry=r,
        )
        self.texts_truncated = Counter(
            "jepa_texts_truncated", "Texts cut to the model's max_seq_len.", ["model"], registry=r
        )
        self._models: dict[str, ModelMetrics] = {}

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def for_model(self, model: str) -> ModelMetrics:
        """One model's metrics, its id bound to every sample: the dispatcher's and the pipeline's
        (one object per model while it is loaded)."""
        bound = self._models.get(model)
        if bound is None:
            bound = self._models[model] = ModelMetrics(self, model)
        return bound

    def forget(self, model: str) -> None:
        """Drop an unloaded model's gauges and /info counters (a counter's total stays: Prometheus
        counts across loads); the next load of it starts them again."""
        self._models.pop(model, None)
        for gauge in (self.queue_depth, self.workers, self.device_speed):
            for labels in list(_children(gauge)):
                if labels and labels[0] == model:
                    gauge.remove(*labels)


def _children(metric: Gauge) -> list[tuple[str, ...]]:
    # prometheus_client keeps a metric's children by their label values
    return [tuple(labels) for labels in metric._metrics]


class _Bound:
    """A labelled metric with the model's id bound first: `.labels(*rest)`, or the child itself
    (`.inc()`, `.set()`, `.observe()`) when the model is its only label."""

    def __init__(self, metric: Counter | Gauge | Histogram, model: str) -> None:
        self._metric = metric
        self._model = model

    def labels(self, *rest: str) -> Any:
        return self._metric.labels(self._model, *rest)

    def __getattr__(self, name: str) -> Any:  # inc / set / observe on the model's own child
        return getattr(self._metric.labels(self._model), name)


@dataclass
class TextStats:
    """What one model's text traffic has been since it loaded (/info): texts, real tokens, truncated."""

    texts: int = 0
    tokens: int = 0
    truncated: int = 0


class ModelMetrics:
    """What one model's dispatcher and pipeline record: the app's metrics, bound to the model's id."""

    def __init__(self, metrics: Metrics, model: str) -> None:
        self.model = model
        m = metrics
        self.items = _Bound(m.items, model)
        self.queue_seconds = _Bound(m.queue_seconds, model)
        self.inference_seconds = _Bound(m.inference_seconds, model)
        self.batch_size = _Bound(m.batch_size, model)
        self.queue_depth = _Bound(m.queue_depth, model)
        self.workers = _Bound(m.workers, model)
        self.device_items = _Bound(m.device_items, model)
        self.device_cost = _Bound(m.device_cost, model)
        self.device_speed = _Bound(m.device_speed, model)
        self.retries = _Bound(m.retries, model)
        self.steals = _Bound(m.steals, model)
        self.text_tokens = _Bound(m.text_tokens, model)
        self.texts_truncated = _Bound(m.texts_truncated, model)
        self.text = TextStats()

    def count_texts(self, texts: int, tokens: int, truncated: int) -> None:
        self.text.texts += texts
        self.text.tokens += tokens
        self.text.truncated += truncated
        self.text_tokens.inc(tokens)
        self.texts_truncated.inc(truncated)
