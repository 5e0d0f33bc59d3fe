"""/classify on a model with a classifier head: the answers jepa.classify gives in process, bit for
bit, however requests are grouped into batches."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from test_server_support import b64, in_process, png_bytes, run

import jepa

from conftest import TINY_VJEPA2_PARTS

N_CLASSES = TINY_VJEPA2_PARTS["head"]["n_classes"]


@pytest.fixture(scope="module")
def classifier(tiny_vjepa2_path: str) -> jepa.Model:
    return jepa.Model(tiny_vjepa2_path)


def _clip(seed: int) -> dict[str, list[dict[str, str]]]:
    # A clip of 3 frames: the tubelet-2 model repeats the last one, as upstream does.
    return {"frames": [{"b64": b64(png_bytes(seed * 10 + i, (40, 36)))} for i in range(3)]}


def _frames(seed: int) -> list[bytes]:
    return [png_bytes(seed * 10 + i, (40, 36)) for i in range(3)]


def _predictions(c: jepa.Classification) -> list[dict[str, object]]:
    """jepa.classify's answer in /classify's shape (jepa.cpp's): top-k, best first."""
    return [{"index": k, "label": label, "probability": p, "logit": float(c.logits[k])}
            for k, label, p in zip(c.indices, c.labels, c.probabilities, strict=True)]


def _serve(model: jepa.Model, body_list: list[dict], max_batch: int = 8,
           through_client: bool = False) -> list[dict]:
    """Post each body to /classify at once on an in-process server; with `through_client`, each
    goes through jepa.client.Client.classify instead (the data list it returns)."""
    from jepa.client import Client

    async def go() -> list[dict]:
        async with in_process(model, max_batch=max_batch, max_wait_ms=20, workers=1) as (client, _):
            url = str(client.make_url("")).rstrip("/")

            async def one(body: dict) -> dict:
                if through_client:
                    data = await asyncio.to_thread(Client(url).classify, body["input"], body["top_k"])
                    return {"data": data}
                r = await client.post("/classify", json=body)
                payload = await r.json()
                assert r.status == 200, payload
                return payload

            return list(await asyncio.gather(*(one(b) for b in body_list)))

    return run(go)


def _logit_bits(reply: dict) -> list[list[int]]:
    return [np.asarray([p["logit"] for p in d["predictions"]], np.float32).view(np.uint32).tolist()
            for d in reply["data"]]


def test_classify_matches_in_process_bit_for_bit(classifier: jepa.Model) -> None:
    seeds = [1, 2, 3, 4]
    [reply] = _serve(classifier, [{"input": [_clip(s) for s in seeds], "top_k": 3}])
    expected = jepa.classify(classifier.context(threads=2), [_frames(s) for s in seeds], top_k=3)
    assert reply["object"] == "list"
    assert [d["index"] for d in reply["data"]] == [0, 1, 2, 3]
    assert all(d["object"] == "classification" for d in reply["data"])
    for got, want in zip(reply["data"], expected, strict=True):
        assert len(got["predictions"]) == 3
        assert got["predictions"] == _predictions(want)  # float32 -> JSON -> float: exact
        probs = [p["probability"] for p in got["predictions"]]
        assert probs == sorted(probs, reverse=True)  # best first


def test_one_request_of_four_equals_four_concurrent_requests(classifier: jepa.Model) -> None:
    seeds = [5, 6, 7, 8]
    [together] = _serve(classifier, [{"input": [_clip(s) for s in seeds], "top_k": N_CLASSES}])
    apart = _serve(classifier, [{"input": [_clip(s)], "top_k": N_CLASSES} for s in seeds], max_batch=4)
    # top_k = every class: every logit of every input is compared, bit for bit.
    assert _logit_bits(together) == [_logit_bits(r)[0] for r in apart]
    [default] = _serve(classifier, [{"input": [_clip(5)]}])
    assert len(default["data"][0]["predictions"]) == 5  # top_k defaults to 5


def test_the_client_reads_the_answer(classifier: jepa.Model) -> None:
    seeds = [1, 2]
    [reply] = _serve(classifier, [{"input": [_clip(s) for s in seeds], "top_k": 2}], through_client=True)
    expected = jepa.classify(classifier.context(threads=2), [_frames(s) for s in seeds], top_k=2)
    assert [d["predictions"] for d in reply["data"]] == [_predictions(c) for c in expected]
