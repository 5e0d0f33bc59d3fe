"""The client libraries people already use, against a running jepa-server on a text model, each with
the settings docs/text.md's "Clients" section gives it: the official openai SDK, LangChain's
OpenAIEmbeddings, llama-index's OpenAIEmbedding, chromadb's OpenAIEmbeddingFunction and litellm. Each
gets the library's own bits for the same texts, with its default batch size (LangChain 1000,
llama-index 100, the others all at once, OpenAI's 2048 at most).

LangChain's default tokenizes with tiktoken (cl100k) and posts the ids: those bodies are written out
here (tiktoken cannot download its tables in the test), and the server refuses them, naming the
setting that makes LangChain send strings."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_server_support import ServerProcess, assert_envelope, http, server_process

import jepa
from jepa.testing.random_text import write_random_bert
from jepa.text import embed_text

pytestmark = pytest.mark.clients

# tiktoken's cl100k_base ids, as LangChain's OpenAIEmbeddings posts them for these texts.
CL100K = {"a photo of a cat": [64, 6685, 315, 264, 8415], "hello world": [15339, 1917]}
MODEL = "minilm"


def docs(n: int) -> list[str]:
    words = ["the", "cat", "dog", "photo", "of", "a", "fast", "vector", "query", "server"]
    return [" ".join(words[(i * 7 + k) % len(words)] for k in range(1 + i % 6)) + f" {i}" for i in range(n)]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    # Named as a user would name the real model: the server's id is the file's stem.
    return write_random_bert(tmp_path_factory.mktemp("clients") / f"{MODEL}.gguf", max_seq_len=32)


@pytest.fixture(scope="module")
def server(model_file: str) -> Iterator[ServerProcess]:
    # Default settings but the batch window, as a user starts it: `jepa-server -m minilm.gguf`.
    with server_process("-m", model_file, "--port", "0", "--max-batch", "32") as s:
        yield s


@pytest.fixture(scope="module")
def want(model_file: str) -> Any:
    ctx = jepa.Model(model_file).context(threads=2)
    return lambda texts: embed_text(ctx, texts)


def bits(a: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, np.float32)).view(np.uint32)


def quiet_imports() -> Any:
    # The clients' own deprecation noise at import is theirs, not ours (pytest turns warnings to errors).
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("ignore")
    return ctx


def test_openai_sdk_takes_2048_inputs(server: ServerProcess, want: Any) -> None:
    import openai

    texts = docs(2048)
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused") as client:  # its pool closed after
        out = client.embeddings.create(model=MODEL, input=texts)
        assert np.array_equal(bits([d.embedding for d in out.data]), bits(want(texts)))
        floats = client.embeddings.create(model=MODEL, input=texts[:3], encoding_format="float")
        assert np.array_equal(bits([d.embedding for d in floats.data]), bits(want(texts[:3])))
        with pytest.raises(openai.BadRequestError) as e:
            client.embeddings.create(model=MODEL, input=docs(2049))
    assert "too many items: 2049" in str(e.value) and "--max-items" in str(e.value)


def test_langchain_default_bodies_are_refused_naming_the_setting(server: ServerProcess) -> None:
    # Exactly what OpenAIEmbeddings(model=..., base_url=...) posts through the openai SDK.
    for body in (
        {"input": [CL100K["a photo of a cat"]], "model": MODEL, "encoding_format": "base64"},
        {"input": list(CL100K.values()), "model": MODEL, "encoding_format": "base64"},
        {"input": [[101, 1037, 6302, 1997, 1037, 4937, 102] + [0] * 121], "model": MODEL},  # padded own ids
    ):
        err = assert_envelope(http(server.url + "/v1/embeddings", "POST", body), 400)
        assert err["code"] == "token_ids_refused", err
        assert "check_embedding_ctx_length=False" in err["message"] and "--accept-token-ids" in err["message"]
        tei = {"inputs": body["input"]}
        assert assert_envelope(http(server.url + "/embed", "POST", tei), 400)["code"] == "token_ids_refused"


def _fake_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    """tiktoken's cl100k without its download: the recorded ids of CL100K's texts."""
    import tiktoken

    class Cl100k:
        def encode_ordinary(self, text: str) -> list[int]:
            return CL100K[text]

    def for_model(name: str) -> Any:
        raise KeyError(name)  # a model tiktoken does not know: LangChain falls back to cl100k_base

    monkeypatch.setattr(tiktoken, "encoding_for_model", for_model)
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: Cl100k())


def test_langchain(server: ServerProcess, want: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    w = quiet_imports()
    import openai
    from langchain_openai import OpenAIEmbeddings

    w.__exit__(None, None, None)
    _fake_tiktoken(monkeypatch)
    default = OpenAIEmbeddings(model=MODEL, base_url=server.url + "/v1", api_key="unused")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="check_embedding_ctx_length=False"):
        default.embed_documents(list(CL100K))
    emb = OpenAIEmbeddings(
        model=MODEL, base_url=server.url + "/v1", api_key="unused", check_embedding_ctx_length=False  # type: ignore[arg-type]
    )
    texts = docs(1500)  # two calls of LangChain's chunk_size (1000)
    assert np.array_equal(bits(emb.embed_documents(texts)), bits(want(texts)))
    assert np.array_equal(bits(emb.embed_query("a photo of a cat")), bits(want(["a photo of a cat"])[0]))


def test_llama_index(server: ServerProcess, want: Any) -> None:
    w = quiet_imports()
    from llama_index.embeddings.openai import OpenAIEmbedding

    w.__exit__(None, None, None)
    with pytest.raises(ValueError):  # docs/text.md: `model=` must be one of OpenAI's names
        OpenAIEmbedding(model=MODEL, api_base=server.url + "/v1", api_key="unused")
    emb = OpenAIEmbedding(model_name=MODEL, api_base=server.url + "/v1", api_key="unused")
    texts = docs(250)  # llama-index's embed_batch_size is 100: three calls
    assert np.array_equal(bits(emb.get_text_embedding_batch(texts)), bits(want(texts)))
    assert np.array_equal(bits(emb.get_query_embedding("a dog")), bits(want(["a dog"])[0]))


def test_chromadb(server: ServerProcess, want: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANONYMIZED_TELEMETRY", "False")
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    w = quiet_imports()
    import chromadb
    from chromadb.utils.embedding_functions import OpenAIEmbeddingFunction

    w.__exit__(None, None, None)
    ef = OpenAIEmbeddingFunction(
        api_key_env_var="OPENAI_API_KEY", api_base=server.url + "/v1", model_name=MODEL
    )
    texts = docs(300)  # chromadb sends a collection's documents in one call
    assert np.array_equal(bits(ef(texts)), bits(want(texts)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
        col = store.create_collection("docs", embedding_function=ef)  # type: ignore[arg-type]
        col.add(ids=[str(i) for i in range(len(texts))], documents=texts)
        hit = col.query(query_texts=[texts[17]], n_results=1)
    assert hit["ids"] == [["17"]]


LITELLM_CHILD = r"""
import base64, json, os, sys
import numpy as np
import litellm

url, model, texts = sys.argv[1], sys.argv[2], json.loads(sys.stdin.read())
out = litellm.embedding(model=f"openai/{model}", api_base=url + "/v1", api_key="unused", input=texts)
vecs = np.asarray([d["embedding"] for d in out.data], np.float32)
try:  # docs/text.md: without the provider prefix litellm does not know where to send it
    litellm.embedding(model=model, api_base=url + "/v1", api_key="unused", input=texts[:1])
    prefix = "accepted"
except litellm.BadRequestError as exc:
    prefix = "Provider NOT provided" in str(exc) and "refused"
print(json.dumps({"vectors": base64.b64encode(vecs.tobytes()).decode(), "prefix": prefix}))
"""


def test_litellm(server: ServerProcess, want: Any) -> None:
    # In a child process: litellm leaves an event loop and its sockets behind at import and use,
    # which the test process would meet as ResourceWarnings in a later test's gc.
    texts = docs(500)  # litellm sends everything at once
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # no fetch of its price table
    r = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", LITELLM_CHILD, server.url, MODEL],
        input=json.dumps(texts), capture_output=True, text=True, timeout=120, env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    vecs = np.frombuffer(base64.b64decode(got["vectors"]), np.float32).reshape(len(texts), -1)
    assert np.array_equal(bits(vecs), bits(want(texts)))
    assert got["prefix"] == "refused"
