"""The bit-identity gate through the socket: the server's vectors are jepa-embed's and jepa.embed's,
bit for bit, in float and base64; grouping (a 4-item request, concurrent clients batched together)
changes nothing; the official openai package reads them the same.

The model is the demo's layout and recipe at the demo's 224 px (197 tokens; every image is resized
and cropped to them), 64 wide in 2 layers instead of 192 in 4: a tenth of the demo's arithmetic, for
a suite make path-test runs once per kernel path (the portable one is ~50x slower than AVX2)."""

from __future__ import annotations

import base64
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_server_support import (
    BIN,
    ServerProcess,
    b64,
    decode_embeddings,
    http,
    identity_images,
    metric,
    server_process,
)

import jepa
from jepa.demo import write_demo_model

from conftest import bits

pytestmark = pytest.mark.every_path
MODEL_ID, WIDTH = "small-vit", 64  # the served id is the file's name


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("model") / f"{MODEL_ID}.gguf"
    return write_demo_model(path, embed_dim=WIDTH, n_layer=2, n_head=2)


@pytest.fixture(scope="module")
def model(model_path: str) -> jepa.Model:
    return jepa.Model(model_path)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return identity_images(tmp_path_factory.mktemp("images"), 100)


@pytest.fixture(scope="module")
def server(model_path: str) -> Iterator[ServerProcess]:
    with server_process("-m", model_path, "--port", "0", "--max-batch", "8", "--max-wait-ms", "20") as s:
        yield s


def _items(paths: list[Path]) -> list[dict[str, str]]:
    return [{"b64": b64(p.read_bytes())} for p in paths]


def _server_embed(url: str, paths: list[Path], pool: str | None, fmt: str) -> np.ndarray:
    body: dict[str, object] = {"input": _items(paths), "encoding_format": fmt}
    if pool is not None:
        body["pool"] = pool
    reply = http(url + "/v1/embeddings", "POST", body)
    assert reply.status == 200, reply.body
    out = reply.json()
    assert all(isinstance(d["embedding"], str if fmt == "base64" else list) for d in out["data"])
    return decode_embeddings(out)


def _in_process(model: jepa.Model, paths: list[Path], pool: str | None) -> np.ndarray:
    ctx = model.context(threads=2)
    return jepa.embed(ctx, [str(p) for p in paths], pool=pool)


def _cli_embed(model_path: str, paths: list[Path], pool: str | None, out: Path) -> np.ndarray:
    """The vectors of the jepa-embed command (test_server_support.cli_embed, on this module's model)."""
    args = [str(BIN / "jepa-embed"), "-m", model_path, *map(str, paths), "-o", str(out), "-q"]
    if pool is not None:
        args += ["--pool", pool]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return np.load(out)


@pytest.mark.parametrize("pool", [None, "mean"])
def test_server_cli_and_python_agree_bit_for_bit(
    server: ServerProcess, model: jepa.Model, images: list[Path], tmp_path: Path, pool: str | None
) -> None:
    python = _in_process(model, images, pool)
    cli = _cli_embed(model.path, images, pool, tmp_path / "cli.npy")
    as_float = _server_embed(server.url, images, pool, "float")
    as_b64 = _server_embed(server.url, images, pool, "base64")
    assert python.shape == (len(images), WIDTH) and python.dtype == np.float32
    for other in (cli, as_float, as_b64):
        assert other.shape == python.shape
        np.testing.assert_array_equal(bits(other), bits(python))


def test_token_grids_agree_bit_for_bit(server: ServerProcess, model: jepa.Model, images: list[Path]) -> None:
    python = _in_process(model, images[:2], "none")
    served = _server_embed(server.url, images[:2], "none", "base64")
    assert served.shape == (2, 197, WIDTH)
    np.testing.assert_array_equal(bits(served), bits(python))


def test_four_items_in_one_request_equal_four_requests(server: ServerProcess, images: list[Path]) -> None:
    together = _server_embed(server.url, images[:4], "mean", "base64")
    apart = np.concatenate([_server_embed(server.url, [p], "mean", "base64") for p in images[:4]])
    np.testing.assert_array_equal(bits(together), bits(apart))


def test_concurrent_clients_batched_equal_serial(
    server: ServerProcess, model_path: str, images: list[Path]
) -> None:
    """8 clients at once on --max-batch 8 against a server that never batches: the same bits, and
    the batched server did form groups larger than one (and none larger than its cap)."""
    before = http(server.url + "/metrics").body.decode()
    with server_process("-m", model_path, "--port", "0", "--max-batch", "1", "--max-wait-ms", "0") as serial:
        expected = {i: _server_embed(serial.url, [p], "mean", "base64") for i, p in enumerate(images)}

    results: dict[tuple[int, int], np.ndarray] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def client(k: int) -> None:
        try:
            start.wait()
            for r in range(3):
                i = (k + r) % len(images)
                results[(k, r)] = _server_embed(server.url, [images[i]], "mean", "base64")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(results) == 24
    for (k, r), got in results.items():
        np.testing.assert_array_equal(bits(got), bits(expected[(k + r) % len(images)]))

    after = http(server.url + "/metrics").body.decode()
    graphs = metric(after, "jepa_batch_size_count") - metric(before, "jepa_batch_size_count")
    singles = metric(after, "jepa_batch_size_bucket", {"le": "1.0"}) - metric(
        before, "jepa_batch_size_bucket", {"le": "1.0"}
    )
    within_cap = metric(after, "jepa_batch_size_bucket", {"le": "8.0"}) - metric(
        before, "jepa_batch_size_bucket", {"le": "8.0"}
    )
    assert graphs < 24, "24 items ran in 24 graphs: nothing was batched"
    assert singles < graphs, "no graph held more than one item"
    assert within_cap == graphs, "a graph was larger than --max-batch"


def test_openai_package_reads_the_same_bits(
    server: ServerProcess, model: jepa.Model, images: list[Path]
) -> None:
    import openai  # requirements/test.txt: the official client, unchanged
    python = _in_process(model, images[:3], "mean")
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as client:
        # The package asks for base64 by default and decodes it itself.
        default = client.embeddings.create(
            model=MODEL_ID, input=_items(images[:3]), extra_body={"pool": "mean"}
        )
        as_float = client.embeddings.create(
            model=MODEL_ID, input=_items(images[:3]), encoding_format="float", extra_body={"pool": "mean"}
        )
        assert default.model == MODEL_ID and default.usage.prompt_tokens == 3 * 196
        for out in (default, as_float):
            got = np.asarray([d.embedding for d in sorted(out.data, key=lambda d: d.index)], dtype=np.float32)
            np.testing.assert_array_equal(bits(got), bits(python))
        raw = client.embeddings.create(
            model=MODEL_ID, input=_items(images[:1]), encoding_format="base64", extra_body={"pool": "mean"}
        )
        got = np.frombuffer(base64.b64decode(raw.data[0].embedding), "<f4")  # type: ignore[arg-type]
        np.testing.assert_array_equal(bits(got), bits(python[0]))
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model=MODEL_ID, input=[{"url": "http://127.0.0.1:1/x.png"}])
        assert refused.value.status_code == 400
        with pytest.raises(openai.NotFoundError):
            client.embeddings.create(model="text-embedding-3-small", input=_items(images[:1]))
