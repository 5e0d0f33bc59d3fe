"""jepa on Ray Serve, on a two-node Ray cluster simulated on this machine (ray.cluster_utils.Cluster:
a head and a worker node on loopback, one CPU each), the application built from docker/ray/serve.yaml
the way `serve deploy` builds it, two replicas, one per node:

- its vectors are jepa-embed's, bit for bit (float and base64), and requests spread over both replicas;
- it batches inside a replica as jepa-server does;
- its refusals are jepa-server's (status, type, code, param, message) for a sample of bad inputs;
- a replica killed while requests flow: no request is answered wrongly, every failure is a 5xx in the
  envelope, and requests after the replacement succeed.

The cluster is this module's own (started and stopped here, about a minute in all). Run these alone
with `pytest -m ray`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from test_server_support import (
    ServerProcess,
    b64,
    cli_embed,
    decode_embeddings,
    demo_path,
    http,
    identity_images,
    metric,
    png_bytes,
    server_process,
)

from conftest import ROOT, bits

# Ray's own modules warn on import (pydantic v1-style fields): not this project's to fix, and the
# suite turns warnings into errors.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import ray

pytestmark = [
    pytest.mark.ray,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

KEY = "ray-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# The same settings for the Ray replicas and the jepa-server they are compared with.
SETTINGS: dict[str, Any] = {"max_batch": 8, "max_wait_ms": 20, "max_items": 6, "max_body_mb": 1,
                            "api_key": KEY}  # fmt: skip
# The cluster's processes inherit these: every replica may be routed to (not only the proxy's node),
# and Ray's own refusals come in the envelope.
CLUSTER_ENV = {
    "RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0",
    "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": "jepa_server.ray.proxy:middlewares",
    "OPENBLAS_NUM_THREADS": "1",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Deployed:
    url: str
    nodes: list[str]
    metrics_ports: list[int]  # each node's Ray metrics export (what Prometheus scrapes)


@pytest.fixture(scope="module")
def deployed() -> Iterator[Deployed]:
    from ray import serve
    from ray.cluster_utils import Cluster
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary
    from ray.serve._private.utils import import_attr

    saved = {k: os.environ.get(k) for k in CLUSTER_ENV}
    os.environ.update(CLUSTER_ENV)
    demo_path()  # written once, before two replicas race to read it
    metrics_ports = [_free_port(), _free_port()]
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "metrics_export_port": metrics_ports[0],
        "_system_config": {"metrics_report_interval_ms": 1000}})  # fmt: skip
    try:
        cluster.add_node(num_cpus=1, metrics_export_port=metrics_ports[1])
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        port = _free_port()
        # The shipped config's http_options, its request_timeout_s shortened to what a test waits:
        # a request lost with a killed replica must end as a 504 envelope, not hang.
        http = yaml.safe_load((ROOT / "docker" / "ray" / "serve.yaml").read_text())["http_options"]
        serve.start(http_options={**http, "host": "127.0.0.1", "port": port, "location": "HeadOnly",
                                  "request_timeout_s": 30})  # fmt: skip
        # The shipped config's application, its args overridden with this test's model and settings.
        config = yaml.safe_load((ROOT / "docker" / "ray" / "serve.yaml").read_text())["applications"][0]
        args = {**config["args"], "model": demo_path(), **SETTINGS, "num_replicas": 2, "num_cpus": 1,
                "health_check_period_s": 1, "health_check_timeout_s": 10}  # fmt: skip
        builder = import_attr(config["import_path"])
        serve.run(call_user_app_builder_with_args_if_necessary(builder, args), route_prefix="/")
        nodes = [n["NodeID"][:12] for n in ray.nodes() if n["Alive"]]
        yield Deployed(f"http://127.0.0.1:{port}", nodes, metrics_ports)
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            cluster.shutdown()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return identity_images(tmp_path_factory.mktemp("ray-images"), 200)


def _body(paths: list[Path], pool: str | None, fmt: str) -> dict[str, Any]:
    body: dict[str, Any] = {"input": [{"b64": b64(p.read_bytes())} for p in paths], "encoding_format": fmt}
    if pool is not None:
        body["pool"] = pool
    return body


Answered = tuple[int, int, dict[str, str], bytes]  # (body index, status, headers, body)


def _post(session: Any, url: str, body: bytes) -> Any:
    headers = {**AUTH, "Content-Type": "application/json"}
    return session.post(url + "/v1/embeddings", data=body, headers=headers)


async def _load(url: str, bodies: list[bytes], clients: int, n: int) -> list[Answered]:
    """`clients` concurrent clients post bodies[i % len] until n are answered: (i, status, headers, body)."""
    import aiohttp

    out: list[Answered] = []
    sent = 0

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal sent
        while sent < n:
            i, sent = sent, sent + 1
            async with _post(session, url, bodies[i % len(bodies)]) as r:
                out.append((i, r.status, {k.lower(): v for k, v in r.headers.items()}, await r.read()))

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return out


def _vector(raw: bytes) -> np.ndarray:
    return decode_embeddings(json.loads(raw))


# -- identity and routing ------------------------------------------------------------------------------


@pytest.mark.parametrize("pool", [None, "mean"])
def test_vectors_are_jepa_embeds_bit_for_bit(
    deployed: Deployed, images: list[Path], tmp_path: Path, pool: str | None
) -> None:
    cli = cli_embed(images, pool, tmp_path / "cli.npy")
    for fmt in ("float", "base64"):
        reply = http(deployed.url + "/v1/embeddings", "POST", _body(images, pool, fmt), headers=AUTH)
        assert reply.status == 200, reply.body[:300]
        served = decode_embeddings(reply.json())
        assert served.shape == cli.shape == (len(images), 192)
        np.testing.assert_array_equal(bits(served), bits(cli))


def test_requests_spread_over_both_replicas_on_both_nodes(deployed: Deployed, images: list[Path]) -> None:
    assert len(deployed.nodes) == 2
    bodies = [json.dumps(_body([p], "mean", "base64")).encode() for p in images]
    expected = [cli_embed([p], "mean", p.with_suffix(".mean.npy"))[0] for p in images]
    answers = asyncio.run(_load(deployed.url, bodies, clients=8, n=96))
    assert all(status == 200 for _, status, _, _ in answers), Counter(s for _, s, _, _ in answers)
    for i, _, _, raw in answers:
        np.testing.assert_array_equal(bits(_vector(raw)[0]), bits(expected[i % len(images)]))
    replicas = Counter(h["x-jepa-replica"] for _, _, h, _ in answers)
    nodes = Counter(h["x-jepa-node"] for _, _, h, _ in answers)
    assert len(replicas) == 2 and set(nodes) == set(deployed.nodes), (replicas, nodes)
    # Ray routes by power of two choices on queue length: both replicas take a real share.
    assert min(replicas.values()) >= 96 // 8, replicas


async def _metrics_per_replica(url: str, replicas: int, rounds: int = 30) -> dict[str, str]:
    """/metrics text of each replica behind the proxy. One GET at a time can land on the same replica
    every time (Ray's router breaks queue-length ties its own way; CI saw 40 of 40 on one), so each
    round sends eight at once: their queues differ and the router spreads them."""
    import aiohttp

    seen: dict[str, str] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def one() -> tuple[str, str]:
            async with session.get(url + "/metrics") as r:
                return r.headers["x-jepa-replica"], await r.text()

        for _ in range(rounds):
            seen.update(await asyncio.gather(*(one() for _ in range(8))))
            if len(seen) >= replicas:
                break
            await asyncio.sleep(0.2)
    return seen


def test_a_replica_batches_across_requests(deployed: Deployed, images: list[Path]) -> None:
    bodies = [json.dumps(_body([p], "mean", "base64")).encode() for p in images]
    asyncio.run(_load(deployed.url, bodies, clients=16, n=96))
    texts = asyncio.run(_metrics_per_replica(deployed.url, replicas=2))
    assert len(texts) == 2, sorted(texts)
    seen = {replica: (metric(text, "jepa_batch_size_sum"), metric(text, "jepa_batch_size_count"))
            for replica, text in texts.items()}  # fmt: skip
    # More items than graphs on some replica: compatible items of different requests shared a graph.
    assert any(items > graphs > 0 for items, graphs in seen.values()), seen


def test_health_and_models_answer_through_ray(deployed: Deployed) -> None:
    health = http(deployed.url + "/health")
    assert health.status == 200 and health.json()["status"] == "ok"
    assert health.json()["model"] == "demo-vit"
    models = http(deployed.url + "/v1/models", headers=AUTH)
    assert models.status == 200
    assert [m["id"] for m in models.json()["data"]] == ["demo-vit"]


def test_engine_counters_are_exported_beside_rays_own(deployed: Deployed) -> None:
    """Each node's Ray metrics endpoint carries the replicas' jepa_* counters (tagged by replica)
    beside Ray Serve's ray_serve_*."""
    http(deployed.url + "/health")
    deadline = time.monotonic() + 60
    seen: dict[int, str] = {}
    while time.monotonic() < deadline and len(seen) < len(deployed.metrics_ports):
        for port in deployed.metrics_ports:
            text = http(f"http://127.0.0.1:{port}/metrics").body.decode()
            if "ray_jepa_requests_total" in text and "ray_serve_" in text:
                seen[port] = text
        time.sleep(1)
    assert len(seen) == len(deployed.metrics_ports), sorted(seen)
    replicas = set()
    for text in seen.values():
        for line in text.splitlines():
            if line.startswith("ray_jepa_requests_total{"):
                replicas.update(re.findall(r'[{,]replica="([^"]+)"', line))
    assert len(replicas) >= 2, replicas  # both replicas' counters, one per node


# -- refusals ------------------------------------------------------------------------------------------


def _bad_requests() -> list[tuple[str, str, str, bytes | None, dict[str, str]]]:
    """(name, method, path, raw body, headers) of a sample of bad inputs."""
    js = {**AUTH, "Content-Type": "application/json"}
    img = {"b64": b64(png_bytes(7, (40, 40)))}

    def body(v: Any) -> bytes:
        return json.dumps(v).encode()

    return [
        ("not json", "POST", "/v1/embeddings", b"{", js),
        ("unknown key", "POST", "/v1/embeddings", body({"input": [img], "colour": 1}), js),
        ("no input", "POST", "/v1/embeddings", body({"model": "demo-vit"}), js),
        ("wrong model", "POST", "/v1/embeddings", body({"input": [img], "model": "gpt-4"}), js),
        ("bad base64", "POST", "/v1/embeddings", body({"input": [{"b64": "!!!"}]}), js),
        ("not an image", "POST", "/v1/embeddings", body({"input": [{"b64": b64(b"hello")}]}), js),
        ("a url", "POST", "/v1/embeddings", body({"input": [{"url": "http://example.com/x.png"}]}), js),
        ("too many items", "POST", "/v1/embeddings", body({"input": [img] * 7}), js),
        ("dimensions", "POST", "/v1/embeddings", body({"input": [img], "dimensions": 100000}), js),
        ("bad pool", "POST", "/embed", body({"inputs": [img], "pool": "max"}), js),
        ("no classifier head", "POST", "/classify", body({"input": [img]}), js),
        ("rollout on an encoder", "POST", "/rollout", body({"frames": [img], "actions": [[[0.0]]]}), js),
        ("body too large", "POST", "/v1/embeddings", b"x" * (1024 * 1024 + 10), js),
        ("no key", "POST", "/v1/embeddings", body({"input": [img]}), {"Content-Type": "application/json"}),
        ("wrong key", "POST", "/v1/embeddings", body({"input": [img]}),
         {"Authorization": "Bearer nope", "Content-Type": "application/json"}),
        ("unknown route", "GET", "/v2/nothing", None, AUTH),
        ("wrong method", "GET", "/v1/embeddings", None, AUTH),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def jepa_server() -> Iterator[ServerProcess]:
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in SETTINGS.items()]
    with server_process("-m", demo_path(), "--port", "0", "--threads", "1", *flags) as s:
        yield s


def test_refusals_are_jepa_servers(deployed: Deployed, jepa_server: ServerProcess) -> None:
    for name, method, path, raw, headers in _bad_requests():
        ours = http(jepa_server.url + path, method, raw=raw, headers=headers)
        theirs = http(deployed.url + path, method, raw=raw, headers=headers)
        assert 400 <= ours.status < 500, (name, ours.status, ours.body[:200])
        assert theirs.status == ours.status, (name, theirs.status, theirs.body[:300])
        assert theirs.json() == ours.json(), name  # status, type, code, param and message
        assert theirs.headers["content-type"] == ours.headers["content-type"], name
        for h in ("allow", "retry-after"):
            assert theirs.headers.get(h) == ours.headers.get(h), (name, h)


# -- a replica dies under load (last: it replaces a replica) ----------------------------------------


def test_a_replica_killed_under_load(deployed: Deployed, images: list[Path]) -> None:
    bodies = [json.dumps(_body([p], "mean", "base64")).encode() for p in images]
    expected = [cli_embed([p], "mean", p.with_suffix(".kill.npy"))[0] for p in images]
    results: list[Answered] = []
    # The statuses of the requests sent once a replacement replica had answered. A request the dead
    # replica held can be answered (a clean 5xx) after those, so "after" is by sending, not answering.
    sent_after: list[int] = []
    replaced_at = [float("inf")]

    async def scenario() -> tuple[str, set[str]]:
        import aiohttp

        done = asyncio.Event()
        before: set[str] = set()

        async def client(session: aiohttp.ClientSession, k: int) -> None:
            i = k
            while not done.is_set():
                sent = time.monotonic()
                async with _post(session, deployed.url, bodies[i % len(bodies)]) as r:
                    headers = {k.lower(): v for k, v in r.headers.items()}
                    results.append((i, r.status, headers, await r.read()))
                if sent > replaced_at[0]:
                    sent_after.append(r.status)
                i += 8

        async def kill_then_wait() -> str:
            while len({h.get("x-jepa-replica") for _, _, h, _ in results} - {None}) < 2:
                await asyncio.sleep(0.05)
            before.update(h["x-jepa-replica"] for _, _, h, _ in results if "x-jepa-replica" in h)
            victim = results[-1][2]["x-jepa-replica"]
            handle = ray.get_actor(f"SERVE_REPLICA::default#jepa#{victim}", namespace="serve")
            ray.kill(handle, no_restart=True)
            # Until a replacement answers, and then 40 answers to requests sent after that.
            deadline = time.monotonic() + 90
            while not {h.get("x-jepa-replica") for _, _, h, _ in results} - before - {None}:
                assert time.monotonic() < deadline, "no replacement replica answered within 90 s"
                await asyncio.sleep(0.1)
            replaced_at[0] = time.monotonic()
            while len(sent_after) < 40:
                await asyncio.sleep(0.05)
            done.set()
            return victim

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            victim, *_ = await asyncio.gather(kill_then_wait(), *(client(session, k) for k in range(8)))
        return victim, before

    victim, before = asyncio.run(scenario())
    statuses = Counter(status for _, status, _, _ in results)
    for i, status, headers, raw in results:
        if status == 200:  # never a wrong answer
            np.testing.assert_array_equal(bits(_vector(raw)[0]), bits(expected[i % len(images)]))
            continue
        # a failure is a clean 5xx in the envelope
        assert 500 <= status < 600, (status, raw[:300])
        assert headers["content-type"].startswith("application/json"), raw[:300]
        err = json.loads(raw)["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["type"] == "server_error", err
    replaced = [h.get("x-jepa-replica") for _, _, h, _ in results]
    new = set(replaced) - before - {None}
    assert new and victim not in replaced[-40:], (victim, new)
    assert len(sent_after) >= 40 and all(status == 200 for status in sent_after), (statuses, sent_after)
    print(f"kill under load: {dict(statuses)}; replaced {victim} by {sorted(new)}")
