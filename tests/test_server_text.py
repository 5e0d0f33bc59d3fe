"""Text models through jepa-server: /v1/embeddings and /embed take strings and token-id arrays; a text's
vector is the same bits as jepa.text's, jepa-embed's and the Python client's, alone or grouped with
other requests' texts; `usage` counts real tokens; `dimensions` truncates and re-normalises; the
official openai package works unchanged; truncation is counted in /info; every bad input is a 4xx
naming the limit, and an image to a text model (text to an image model) names the modality."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_server_support import (
    BIN,
    ServerProcess,
    assert_envelope,
    decode_embeddings,
    http,
    image_item,
    server_process,
)

import jepa
from jepa.client import Client
from jepa.testing.random_text import write_random_bert
from jepa.text import embed_text

pytestmark = pytest.mark.every_path

TEXTS = [
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "a",
    "one two three four five six seven eight nine ten, one two three four five six seven eight nine ten",
    "This photo of a cat is not a photo of a dog.",
]


@pytest.fixture(scope="module")
def text_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_random_bert(tmp_path_factory.mktemp("text") / "tiny-bert.gguf", max_seq_len=24)


@pytest.fixture(scope="module")
def server(text_model: str) -> Iterator[ServerProcess]:
    args = ("-m", text_model, "--port", "0", "--max-batch", "8", "--max-wait-ms", "20",
            "--max-request-chars", "2000", "--max-request-tokens", "300", "--text-token-budget", "40",
            "--accept-token-ids")
    with server_process(*args) as s:
        yield s


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def _in_process(path: str, texts: list[str]) -> np.ndarray:
    return embed_text(jepa.Model(path).context(threads=2), texts)


def test_vectors_are_the_librarys_bits(server: ServerProcess, text_model: str, tmp_path: Path) -> None:
    want = _in_process(text_model, TEXTS)
    for fmt in ("float", "base64"):
        reply = http(server.url + "/v1/embeddings", "POST", {"input": TEXTS, "encoding_format": fmt})
        assert reply.status == 200, reply.body
        out = reply.json()
        assert np.array_equal(bits(decode_embeddings(out)), bits(want)), fmt
        n_tok = sum(len(t) for t in jepa.Model(text_model).tokenizer.encode(TEXTS))
        assert out["usage"]["prompt_tokens"] == out["usage"]["total_tokens"] == n_tok
    one = http(server.url + "/v1/embeddings", "POST", {"input": TEXTS[1]}).json()
    assert np.array_equal(bits(decode_embeddings(one)[0]), bits(want[1]))
    tei = http(server.url + "/embed", "POST", {"inputs": TEXTS}).json()
    assert np.array_equal(bits(np.asarray(tei, np.float32)), bits(want))
    assert np.array_equal(bits(Client(server.url).embed_text(TEXTS)), bits(want))
    # jepa-embed: --text and a .txt file.
    (tmp_path / "t.txt").write_text("\n".join(TEXTS[2:]) + "\n")
    out_path = tmp_path / "v.npy"
    texts = [f"--text={t}" for t in TEXTS[:2]]
    args = [str(BIN / "jepa-embed"), "-m", text_model, *texts, str(tmp_path / "t.txt"), "-o", str(out_path)]
    args.append("-q")
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert np.array_equal(bits(np.load(out_path)), bits(want))


def test_concurrent_requests_group_without_changing_bits(server: ServerProcess, text_model: str) -> None:
    want = _in_process(text_model, TEXTS)
    got: dict[int, np.ndarray] = {}

    def one(i: int) -> None:
        reply = http(server.url + "/v1/embeddings", "POST", {"input": [TEXTS[i % len(TEXTS)]]})
        got[i] = decode_embeddings(reply.json())[0]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, v in got.items():
        assert np.array_equal(bits(v), bits(want[i % len(TEXTS)])), i


def test_token_ids_dimensions_and_the_openai_sdk(server: ServerProcess, text_model: str) -> None:
    model = jepa.Model(text_model)
    ids = [t.ids.tolist() for t in model.tokenizer.encode(TEXTS[:2])]
    want = _in_process(text_model, TEXTS[:2])
    out = http(server.url + "/v1/embeddings", "POST", {"input": ids}).json()
    assert np.array_equal(bits(decode_embeddings(out)), bits(want))
    single = http(server.url + "/v1/embeddings", "POST", {"input": ids[0]}).json()
    assert np.array_equal(bits(decode_embeddings(single)[0]), bits(want[0]))
    body = {"input": TEXTS[:2], "dimensions": 8}
    small = decode_embeddings(http(server.url + "/v1/embeddings", "POST", body).json())
    cut = want[:, :8] / np.linalg.norm(want[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose(small, cut, atol=1e-7)
    np.testing.assert_allclose(np.linalg.norm(small, axis=1), 1.0, atol=1e-6)

    import openai

    # closed when done: its connection pool's open socket would be a ResourceWarning (an error here)
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused") as client:
        r = client.embeddings.create(model="tiny-bert", input=TEXTS)
    sdk = np.asarray([d.embedding for d in r.data], np.float32)
    assert np.array_equal(bits(sdk), bits(_in_process(text_model, TEXTS)))
    assert r.usage.prompt_tokens > len(TEXTS)


def test_truncation_is_counted_in_info(server: ServerProcess) -> None:
    before = http(server.url + "/info").json()["model"]["text"]
    long = " ".join(["seven"] * 40)
    out = http(server.url + "/v1/embeddings", "POST", {"input": [long, "cat"]}).json()
    assert out["usage"]["truncated_inputs"] == 1 and out["usage"]["prompt_tokens"] == 24 + 3
    after = http(server.url + "/info").json()["model"]["text"]
    assert after["truncated"] == before["truncated"] + 1
    assert after["texts"] == before["texts"] + 2
    assert (after["max_seq_len"], after["pooling"], after["normalize"]) == (24, "mean", True)


@pytest.mark.parametrize(("body", "status", "code", "words"), [
    ({"input": ""}, 400, "invalid_item", "empty string"),
    ({"input": ["ok", ""]}, 400, "invalid_item", "input[1]"),
    ({"input": []}, 400, "invalid_value", "empty list"),
    ({"input": ["x " * 600, "y " * 500]}, 413, "input_too_large", "--max-request-chars"),
    ({"input": ["one two three four five six seven eight nine ten"] * 30}, 413, "input_too_large",
     "--max-request-tokens"),
    ({"input": [[2, 9999, 3]]}, 400, "invalid_input", "outside this model's vocabulary"),
    ({"input": [[64, 6685, 315, 264, 8415]]}, 400, "invalid_input", "send the text as a string"),  # cl100k
    ({"input": [[2, 40, 41, 3, 0, 0]]}, 400, "invalid_input", "pad id 0 at position 4"),
    ({"input": [[40, 41]]}, 400, "invalid_input", "starting with [2] and ending with [3]"),
    ({"input": [[2] + [5] * 23 + [3]]}, 400, "invalid_input", "max_seq_len of 24"),
    ({"input": [image_item(1)]}, 400, "wrong_modality", "text model"),
    ({"input": ["ok", 3]}, 400, "invalid_item", "input[1]"),
    ({"input": "bad \ud800"}, 400, "invalid_item", "surrogate"),
    ({"input": ["a"], "pool": "max"}, 400, "invalid_input", "unknown pool"),
])
def test_refusals(server: ServerProcess, body: dict[str, object], status: int, code: str, words: str) -> None:
    err = assert_envelope(http(server.url + "/v1/embeddings", "POST", body), status)
    assert err["code"] == code and words in err["message"], err


def test_text_to_an_image_model_names_the_modality() -> None:
    with server_process("--demo", "--port", "0") as s:
        err = assert_envelope(http(s.url + "/v1/embeddings", "POST", {"input": ["a photo of a cat"]}), 400)
        assert err["code"] == "wrong_modality" and "image model" in err["message"], err
        # It offers only what an image model takes: a clip is not one of them.
        assert '{"b64": ...} or a local path' in err["message"] and "frames" not in err["message"], err
        err = assert_envelope(http(s.url + "/v1/embeddings", "POST", {"input": [[101, 2023, 102]]}), 400)
        assert err["code"] == "wrong_modality" and "token ids" in err["message"], err


def test_health_lists_the_text_models_own_pool_modes(server: ServerProcess) -> None:
    pool = http(server.url + "/health").json()["pool"]
    assert pool == {"default": "mean", "modes": ["cls", "mean", "last_token"]}
    info = http(server.url + "/info").json()["model"]
    assert info["pool"] == pool and "preprocess" not in info
    for mode in pool["modes"]:  # every advertised mode is served
        assert http(server.url + "/v1/embeddings", "POST", {"input": "a cat", "pool": mode}).status == 200
