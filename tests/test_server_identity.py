"""The bit-identity gate through the socket: the server's vectors are jepa-embed's and jepa.embed's,
bit for bit, in float and base64; grouping (a 4-item request, concurrent clients batched together)
changes nothing; the official openai package reads them the same."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_server_support import (
    ServerProcess,
    b64,
    cli_embed,
    decode_embeddings,
    demo_model,
    http,
    identity_images,
    metric,
    server_process,
)

import jepa

from conftest import bits

pytestmark = pytest.mark.every_path


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return identity_images(tmp_path_factory.mktemp("images"), 100)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with server_process("--demo", "--port", "0", "--max-batch", "8", "--max-wait-ms", "20") as s:
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


def _in_process(paths: list[Path], pool: str | None) -> np.ndarray:
    ctx = demo_model().context(threads=2)
    return jepa.embed(ctx, [str(p) for p in paths], pool=pool)


@pytest.mark.parametrize("pool", [None, "mean"])
def test_server_cli_and_python_agree_bit_for_bit(
    server: ServerProcess, images: list[Path], tmp_path: Path, pool: str | None
) -> None:
    python = _in_process(images, pool)
    cli = cli_embed(images, pool, tmp_path / "cli.npy")
    as_float = _server_embed(server.url, images, pool, "float")
    as_b64 = _server_embed(server.url, images, pool, "base64")
    assert python.shape == (len(images), 192) and python.dtype == np.float32
    for other in (cli, as_float, as_b64):
        assert other.shape == python.shape
        np.testing.assert_array_equal(bits(other), bits(python))


def test_token_grids_agree_bit_for_bit(server: ServerProcess, images: list[Path]) -> None:
    python = _in_process(images[:2], "none")
    served = _server_embed(server.url, images[:2], "none", "base64")
    assert served.shape == (2, 197, 192)
    np.testing.assert_array_equal(bits(served), bits(python))


def test_four_items_in_one_request_equal_four_requests(server: ServerProcess, images: list[Path]) -> None:
    together = _server_embed(server.url, images[:4], "mean", "base64")
    apart = np.concatenate([_server_embed(server.url, [p], "mean", "base64") for p in images[:4]])
    np.testing.assert_array_equal(bits(together), bits(apart))


def test_concurrent_clients_batched_equal_serial(server: ServerProcess, images: list[Path]) -> None:
    """8 clients at once on --max-batch 8 against a server that never batches: the same bits, and
    the batched server did form groups larger than one (and none larger than its cap)."""
    before = http(server.url + "/metrics").body.decode()
    with server_process("--demo", "--port", "0", "--max-batch", "1", "--max-wait-ms", "0") as serial:
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


def test_openai_package_reads_the_same_bits(server: ServerProcess, images: list[Path]) -> None:
    import openai  # requirements/test.txt: the official client, unchanged
    python = _in_process(images[:3], "mean")
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as client:
        # The package asks for base64 by default and decodes it itself.
        default = client.embeddings.create(
            model="demo-vit", input=_items(images[:3]), extra_body={"pool": "mean"}
        )
        as_float = client.embeddings.create(
            model="demo-vit", input=_items(images[:3]), encoding_format="float", extra_body={"pool": "mean"}
        )
        assert default.model == "demo-vit" and default.usage.prompt_tokens == 3 * 196
        for out in (default, as_float):
            got = np.asarray([d.embedding for d in sorted(out.data, key=lambda d: d.index)], dtype=np.float32)
            np.testing.assert_array_equal(bits(got), bits(python))
        raw = client.embeddings.create(
            model="demo-vit", input=_items(images[:1]), encoding_format="base64", extra_body={"pool": "mean"}
        )
        got = np.frombuffer(base64.b64decode(raw.data[0].embedding), "<f4")  # type: ignore[arg-type]
        np.testing.assert_array_equal(bits(got), bits(python[0]))
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="demo-vit", input=[{"url": "http://127.0.0.1:1/x.png"}])
        assert refused.value.status_code == 400
        with pytest.raises(openai.NotFoundError):
            client.embeddings.create(model="text-embedding-3-small", input=_items(images[:1]))
