"""/classify on a model with a classifier head: the answers jepa.classify gives in process, bit for
bit, however requests are grouped into batches."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from test_server_support import b64, png_bytes, run

import jepa
from jepa.convert.vjepa2 import write_random


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> jepa.Model:
    path = tmp_path_factory.mktemp("cls") / "vjepa2-cls.gguf"
    write_random(path, embed_dim=64, n_layer=2, n_head=2, img_size=32, n_frames=4,
                 head={"n_classes": 7, "n_pool_layers": 1}, seed=11)
    return jepa.Model(path)


def _clip(seed: int) -> dict[str, list[dict[str, str]]]:
    # A clip of 3 frames: the tubelet-2 model repeats the last one, as upstream does.
    return {"frames": [{"b64": b64(png_bytes(seed * 10 + i, (40, 36)))} for i in range(3)]}


def _frames(seed: int) -> list[bytes]:
    return [png_bytes(seed * 10 + i, (40, 36)) for i in range(3)]


def _serve(model: jepa.Model, body_list: list[dict], max_batch: int = 8) -> list[dict]:
    from aiohttp.test_utils import TestClient, TestServer

    from jepa_server.app import create_app, wait_ready
    from jepa_server.settings import Settings

    async def go() -> list[dict]:
        settings = Settings(model=str(Path(model.path)), max_batch=max_batch, max_wait_ms=20, workers=1)
        app = create_app(settings, model=model)
        async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
            await wait_ready(app)

            async def one(body: dict) -> dict:
                r = await client.post("/classify", json=body)
                payload = await r.json()
                assert r.status == 200, payload
                return payload

            return list(await asyncio.gather(*(one(b) for b in body_list)))

    return run(go)


def test_classify_matches_in_process_bit_for_bit(classifier: jepa.Model) -> None:
    seeds = [1, 2, 3, 4]
    [reply] = _serve(classifier, [{"input": [_clip(s) for s in seeds], "top_k": 3}])
    expected = jepa.classify(classifier.context(threads=2), [_frames(s) for s in seeds], top_k=3)
    assert [d["index"] for d in reply["data"]] == [0, 1, 2, 3]
    for got, want in zip(reply["data"], expected, strict=True):
        assert got["labels"] == list(want.labels) and len(got["labels"]) == 3
        assert got["indices"] == [int(i) for i in want.indices]
        logits = np.asarray(got["logits"], dtype=np.float32)
        assert np.array_equal(logits.view(np.uint32), np.asarray(want.logits, np.float32).view(np.uint32))
        assert got["probabilities"] == [float(p) for p in want.probabilities]


def test_one_request_of_four_equals_four_concurrent_requests(classifier: jepa.Model) -> None:
    seeds = [5, 6, 7, 8]
    [together] = _serve(classifier, [{"input": [_clip(s) for s in seeds]}])
    apart = _serve(classifier, [{"input": [_clip(s)]} for s in seeds], max_batch=4)
    assert [d["logits"] for d in together["data"]] == [r["data"][0]["logits"] for r in apart]
    assert all(len(d["labels"]) == 5 for d in together["data"])  # top_k defaults to 5
