"""A text model on several devices (`--devices cpu,cpu`): its batch budget is measured at its own
native item (max_seq_len tokens, not an image's patches), so it loads and answers on every replica
with the library's bits."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from test_server_support import decode_embeddings, in_process, metric, run

import jepa
from jepa.testing.random_text import write_random_bert
from jepa.text import embed_text
from jepa_server.keys import RUNTIME
from jepa_server.replicas import activation_bytes, budget_from_bytes, native_tokens
from jepa_server.scheduler import CostModel

TEXTS = [f"text {i}: the quick brown fox jumps over the lazy dog " * (1 + i % 4) for i in range(24)]


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def test_a_text_models_budget_is_measured_at_its_max_seq_len(tmp_path: Path) -> None:
    model = jepa.Model(write_random_bert(tmp_path / "bert.gguf", max_seq_len=48))
    assert native_tokens(model) == 48
    per_item = activation_bytes(model, 48)
    assert budget_from_bytes(model, 10 * per_item) == CostModel.of(model).item(48) * 10


def test_two_cpu_replicas_answer_with_the_librarys_bits(tmp_path: Path) -> None:
    path = write_random_bert(tmp_path / "bert.gguf", max_seq_len=48)
    model = jepa.Model(path)
    want = embed_text(model.context(threads=1), TEXTS)

    async def body() -> None:
        async with in_process(model, devices="cpu,cpu", max_batch=2, workers=1, threads=1) as (client, app):
            r = await client.post("/v1/embeddings", json={"input": TEXTS})
            assert r.status == 200, await r.text()
            got = decode_embeddings(await r.json())
            assert np.array_equal(bits(got), bits(want))
            text = (await (await client.get("/metrics")).read()).decode()
            items = [metric(text, "jepa_device_items_total", {"device": d}) for d in ("cpu", "cpu#2")]
            assert sum(items) == len(TEXTS) and min(items) > 0, items  # both replicas answered
            engine = app[RUNTIME].registry.resident["bert"].engine  # type: ignore[union-attr]
            assert [r.device for r in engine.replicas] == ["cpu", "cpu#2"]
            assert all(math.isfinite(r.budget) and r.budget > 0 for r in engine.replicas)

    run(body)
