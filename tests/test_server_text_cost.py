"""Text tasks reach the scheduler with their real cost: a text's tokens times the model's cost per
token (its payload has a fixed width, so its shape cannot tell). The queue then orders texts by
length across requests and a device's budget counts what is computed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_server_support import in_process, metric, run

import jepa
from jepa_server.keys import RUNTIME
from jepa_server.scheduler import CostModel


def test_a_text_costs_its_real_tokens(tmp_path: Path) -> None:
    from jepa.testing.random_text import write_random_bert

    path = write_random_bert(tmp_path / "bert.gguf")
    model = jepa.Model(path)
    texts = ["a", "a photo of a cat on a mat", "the quick brown fox jumps over the lazy dog again and again"]
    lengths = [len(t) for t in model.tokenizer.encode(texts)]
    assert len(set(lengths)) == 3  # three different costs
    want = sum(CostModel.of(model).item(n) for n in lengths)

    async def body() -> None:
        async with in_process(models_dir=str(tmp_path)) as (client, app):
            r = await client.post("/v1/embeddings", json={"model": "bert", "input": texts})
            assert r.status == 200, await r.text()
            text = (await (await client.get("/metrics")).read()).decode()
            assert metric(text, "jepa_device_cost_total", {"device": "cpu"}) == pytest.approx(want)
            engine = app[RUNTIME].registry.resident["bert"].engine  # type: ignore[union-attr]
            with pytest.raises(ValueError, match="2 costs for 1 inputs"):
                await engine.dispatcher.run_batched(lambda c, xs, a: xs, None, [np.zeros(1)], [1.0, 2.0])

    run(body)
