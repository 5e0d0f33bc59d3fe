"""jepa_server.ray's parts without a cluster: the deployment's arguments split into settings and Ray
options, the engine metrics copied into Ray gauges, Ray's own refusals rewritten into the envelope,
the hop's answer when the embedded server is gone, the shipped serve config against Ray's own schema,
and that neither `import jepa` nor jepa-server imports Ray."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

import jepa

from conftest import ROOT

with warnings.catch_warnings():  # Ray's modules warn on import (pydantic v1-style fields)
    warnings.simplefilter("ignore", DeprecationWarning)
    from jepa_server.ray.embedded import EmbeddedServer
    from jepa_server.ray.export import EngineMetricsExport, registry_samples
    from jepa_server.ray.proxy import EnvelopeErrors
    from jepa_server.ray.spec import MIN_ONGOING, ReplicaSpec, replica_settings

from jepa_server.metrics import Metrics
from jepa_server.settings import SettingsError

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SERVE_YAML = ROOT / "docker" / "ray" / "serve.yaml"


# -- the deployment's arguments ------------------------------------------------------------------------


def test_arguments_split_into_settings_and_deployment() -> None:
    spec = ReplicaSpec.from_args({"model": "/m/vit.gguf", "max-batch": "16", "max_wait_ms": 2,
                                  "num_replicas": "3", "num_cpus": 2})  # fmt: skip
    assert spec.settings == {"model": "/m/vit.gguf", "max_batch": "16", "max_wait_ms": 2}
    assert spec.deployment == {"num_replicas": 3, "num_cpus": 2.0}
    assert spec.parsed().max_batch == 16  # command-line strings typed by the settings' own parser
    opts = spec.deployment_options()
    assert opts["num_replicas"] == 3 and "autoscaling_config" not in opts
    assert opts["ray_actor_options"] == {"num_cpus": 2.0, "num_gpus": 0.0}
    # a replica holds enough requests to fill its batches
    assert opts["max_ongoing_requests"] == max(MIN_ONGOING, 32)
    assert opts["graceful_shutdown_timeout_s"] > spec.parsed().shutdown_timeout_s


def test_autoscaling_from_min_and_max_replicas() -> None:
    opts = ReplicaSpec.from_args({"demo": True, "min_replicas": 1, "max_replicas": 4}).deployment_options()
    assert "num_replicas" not in opts
    want = {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 8.0}  # one batch per replica
    assert opts["autoscaling_config"] == want


def test_a_gpu_setting_asks_ray_for_a_gpu() -> None:
    spec = ReplicaSpec.from_args({"model": "/m/vit.gguf", "gpu": 0})
    assert spec.deployment_options()["ray_actor_options"]["num_gpus"] == 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"model": "m.gguf", "port": 9000}, "port is not a replica's setting"),
        ({"model": "m.gguf", "host": "0.0.0.0"}, "host is not a replica's setting"),
        ({"model": "m.gguf", "max_bach": 4}, "unknown setting 'max_bach'"),
        ({"model": "m.gguf", "max_batch": 99}, "max_batch must be in 1..32"),
        ({"model": "m.gguf", "max_batch": "many"}, "max_batch must be int"),
        ({"model": "m.gguf", "num_replicas": 0}, "num_replicas must be at least 1"),
        ({"model": "m.gguf", "num_replicas": "two"}, "num_replicas must be int"),
        ({"model": "m.gguf", "num_replicas": True}, "num_replicas must be int"),
        ({"model": "m.gguf", "min_replicas": 3, "max_replicas": 2}, "min_replicas must be at most"),
        ({"model": "m.gguf", "num_cpus": -1}, "num_cpus must be 0 or more"),
        ({"max_batch": 4}, "no model"),
    ],
)
def test_bad_arguments_are_refused_before_any_replica_starts(args: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        ReplicaSpec.from_args(args)


def test_a_replica_uses_the_cpus_ray_gave_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jepa, "default_threads", lambda: 64)  # a big machine (test_auto_threads: a small one)
    assert replica_settings({"model": "m.gguf"}, 4.0, [], {}).graph_threads == 4
    assert replica_settings({"model": "m.gguf"}, 0.5, [], {}).graph_threads == 1  # a fraction: one thread
    assert replica_settings({"model": "m.gguf", "workers": 2}, 4.0, [], {}).graph_threads == 2
    assert replica_settings({"model": "m.gguf", "threads": 3}, 4.0, [], {}).graph_threads == 3  # given wins
    assert replica_settings({"model": "m.gguf"}, 1.0, [], {}).decode_threads == 1
    assert replica_settings({"model": "m.gguf"}, 2.0, [3], {}).device == "cuda:0"  # Ray's device is 0
    assert replica_settings({"model": "m.gguf"}, 2.0, [], {}).device == "cpu"


def test_a_replicas_threads_are_capped_by_the_cpus_its_process_may_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray's CPUs are a reservation, not a limit: 4 CPUs in a container whose cgroup allows 1 run 1 thread.
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    monkeypatch.setenv("JEPA_CGROUP_ROOT", str(tmp_path))
    assert replica_settings({"model": "m.gguf"}, 4.0, [], {}).graph_threads == 1
    assert replica_settings({"model": "m.gguf", "threads": 3}, 4.0, [], {}).graph_threads == 3  # given wins


def test_a_replicas_environment_fills_what_the_arguments_leave_out() -> None:
    env = {"JEPA_API_KEY": "from-a-secret", "JEPA_MAX_BATCH": "4", "JEPA_PORT": "1", "OTHER": "x"}
    s = replica_settings({"model": "m.gguf", "max_batch": 16}, 1.0, [], env)
    assert s.api_key == "from-a-secret"
    assert s.max_batch == 16  # the arguments win, as flags win over the environment in jepa-server
    assert s.port == 8080  # Ray's proxy owns the port: JEPA_PORT is not read
    with pytest.raises(SettingsError, match="max_batch must be int"):
        replica_settings({"model": "m.gguf"}, 1.0, [], {"JEPA_MAX_BATCH": "lots"})


def test_the_shipped_serve_config_is_valid_for_ray_and_for_the_builder() -> None:
    from ray.serve.schema import ServeDeploySchema

    data = yaml.safe_load(SERVE_YAML.read_text())
    schema = ServeDeploySchema.model_validate(data)  # Ray's own check of a `serve deploy` file
    (application,) = schema.applications
    assert application.import_path == "jepa_server.ray:app" and application.route_prefix == "/"
    (dep,) = application.deployments
    assert dep.name == "jepa"
    auto = dep.autoscaling_config
    assert isinstance(auto, dict) and {"min_replicas", "max_replicas", "target_ongoing_requests"} <= set(auto)
    actor = dep.ray_actor_options
    assert actor is not None and actor.num_cpus is not None and actor.num_cpus >= 1
    assert isinstance(dep.max_ongoing_requests, int)
    assert dep.max_ongoing_requests >= 2 * application.args["max_batch"]
    # the args are jepa-server settings the builder accepts
    spec = ReplicaSpec.from_args(application.args)
    assert spec.parsed().max_batch == application.args["max_batch"]


def test_serve_run_finds_the_builder() -> None:
    from ray.serve._private.utils import import_attr

    assert import_attr("jepa_server.ray:app").__name__ == "app"


# -- the engine's metrics in Ray -----------------------------------------------------------------------


class FakeGauge:
    def __init__(self, name: str, doc: str, keys: tuple[str, ...], seen: dict[str, Any]) -> None:
        self.name, self.keys, self.seen = name, keys, seen

    def set(self, value: float, tags: dict[str, str]) -> None:
        assert set(tags) == set(self.keys)
        self.seen[(self.name, tuple(sorted(tags.items())))] = value


def test_engine_counters_are_copied_into_gauges_tagged_with_the_replica() -> None:
    m = Metrics()
    m.requests.labels("/v1/embeddings", "200").inc(3)
    m.for_model("demo").batch_size.observe(4)
    seen: dict[Any, float] = {}
    made: list[str] = []

    def gauge(name: str, doc: str, keys: tuple[str, ...]) -> FakeGauge:
        made.append(name)
        return FakeGauge(name, doc, keys, seen)

    export = EngineMetricsExport(m.registry, {"replica": "r1"}, gauge)
    n = export.export_once()
    assert n == len(registry_samples(m.registry)) and n > 0
    key = ("jepa_requests_total", (("endpoint", "/v1/embeddings"), ("replica", "r1"), ("status", "200")))
    assert seen[key] == 3.0
    assert seen[("jepa_batch_size_count", (("model", "demo"), ("replica", "r1")))] == 1.0
    assert seen[("jepa_batch_size_sum", (("model", "demo"), ("replica", "r1")))] == 4.0
    assert not any(name.endswith("_created") for name in made)
    m.requests.labels("/v1/embeddings", "200").inc()
    export.export_once()
    assert seen[key] == 4.0 and len(made) == len(set(made))  # one gauge per sample name, reused


# -- Ray's own refusals in the envelope ----------------------------------------------------------------


def _asgi(status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        hdrs = headers if headers is not None else [(b"content-type", b"text/plain; charset=utf-8")]
        await send({"type": "http.response.start", "status": status, "headers": hdrs})
        await send({"type": "http.response.body", "body": body})

    return app


def _through(app: Any) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    asyncio.run(EnvelopeErrors(app)({"type": "http"}, receive, send))
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], dict(start["headers"]), body


def test_a_dead_replicas_500_becomes_the_envelope() -> None:
    status, headers, body = _through(_asgi(500, b"Internal Server Error"))
    assert status == 500 and headers[b"content-type"].startswith(b"application/json")
    err = json.loads(body)["error"]
    assert err["type"] == "server_error" and err["code"] == "replica_failed"
    assert "Internal Server Error" in err["message"] and int(headers[b"content-length"]) == len(body)


def test_backpressure_keeps_its_status_and_says_retry() -> None:
    status, headers, body = _through(_asgi(503, b"Request dropped due to backpressure"))
    assert status == 503 and headers[b"retry-after"] == b"1"
    assert json.loads(body)["error"]["code"] == "unavailable"


def test_a_replicas_own_answer_passes_untouched() -> None:
    raw = b'{"error": {"message": "m", "type": "invalid_request_error", "param": null, "code": "x"}}'
    hdrs = [(b"content-type", b"application/json"), (b"x-jepa-replica", b"r1")]
    assert _through(_asgi(400, raw, hdrs)) == (400, dict(hdrs), raw)
    assert _through(_asgi(200, b"[]", hdrs))[2] == b"[]"


def test_no_answer_at_all_is_a_500_envelope() -> None:
    async def silent(scope: Any, receive: Any, send: Any) -> None:
        return None  # what Ray's proxy does when the replica died under the request

    status, _, body = _through(silent)
    err = json.loads(body)["error"]
    assert status == 500 and err["code"] == "replica_failed" and "died" in err["message"]


def test_an_exception_in_the_proxy_is_a_500_envelope() -> None:
    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    status, _, body = _through(broken)
    assert status == 500 and json.loads(body)["error"]["code"] == "replica_failed"



def test_the_proxys_timeout_is_a_504_envelope() -> None:
    """Ray's proxy answers 408 when no replica answered within its request_timeout_s (a request lost
    with a dying replica ends there): the wait is the server's, never the client's fault."""
    status, _, body = _through(_asgi(408, b"Request timed out after 30.0s."))
    err = json.loads(body)["error"]
    assert status == 504 and err["code"] == "deadline_exceeded" and err["type"] == "server_error"
    assert "request_timeout_s" in err["message"] and "timed out after 30.0s" in err["message"]


# -- the hop -------------------------------------------------------------------------------------------


def test_the_hop_to_a_closed_server_is_a_503_envelope(tmp_path: Any) -> None:
    async def scenario() -> Any:
        from aiohttp import web

        server = EmbeddedServer(web.Application(), web.AppRunner(web.Application()), str(tmp_path))
        try:
            headers = [("Content-Type", "application/json")]
            return await server.forward("POST", "/v1/embeddings", headers, b"{}")
        finally:
            if server._session is not None:
                await server._session.close()

    answer = asyncio.run(scenario())
    assert answer.status == 503
    assert dict(answer.headers)["Retry-After"] == "1"
    err = json.loads(answer.body)["error"]
    assert err["code"] == "replica_unavailable" and err["type"] == "server_error"


def test_a_body_too_large_is_refused_from_its_length_unread() -> None:
    """The hop tells the app a body's declared length without sending it: the app's own 413, the
    message jepa-server gives for the same Content-Length."""
    from test_server_support import demo_path

    settings = replica_settings({"model": demo_path(), "max_body_mb": 1}, 1.0, [], {})
    n = 5 * 1024 * 1024

    async def scenario() -> Any:
        server = await EmbeddedServer.start(settings, 120)
        try:
            headers = [("Content-Type", "application/json"), ("Content-Length", str(n))]
            return await server.forward("POST", "/v1/embeddings", headers, b"", n)
        finally:
            await server.close()

    answer = asyncio.run(scenario())
    assert answer.status == 413
    err = json.loads(answer.body)["error"]
    assert err["message"] == (f"the request body is {n} bytes; this server takes at most {1024 * 1024} "
                              "(--max-body-mb 1)")  # fmt: skip


def test_a_models_directory_is_served_through_the_hop(tmp_path: Any, tiny_vit_path: str) -> None:
    """models_dir passes through as any setting: the replica's app serves every GGUF of the
    directory, chosen per request by `model`, each answer the in-process one bit for bit."""
    import shutil

    import numpy as np
    from test_server_support import b64, decode_embeddings, demo_path, png_bytes

    import jepa

    from conftest import bits

    shutil.copy(demo_path(), tmp_path / "big.gguf")
    shutil.copy(tiny_vit_path, tmp_path / "small.gguf")
    spec = ReplicaSpec.from_args({"models_dir": str(tmp_path), "max_batch": 4})
    settings = replica_settings(spec.settings, 1.0, [], {})
    image = png_bytes(3, (40, 40))
    body = {"input": [{"b64": b64(image)}], "pool": "mean", "encoding_format": "base64"}

    async def scenario() -> dict[str, Any]:
        server = await EmbeddedServer.start(settings, 120)
        try:
            out = {}
            for name in ("big", "small"):
                raw = json.dumps({**body, "model": name}).encode()
                headers = [("Content-Type", "application/json")]
                answer = await server.forward("POST", "/v1/embeddings", headers, raw)
                assert answer.status == 200, answer.body[:300]
                out[name] = json.loads(answer.body)
            return out
        finally:
            await server.close()

    answers = asyncio.run(scenario())
    for name in ("big", "small"):
        model = jepa.Model(str(tmp_path / f"{name}.gguf"))
        want = jepa.embed(model.context(threads=1), [image], pool="mean")
        assert answers[name]["model"] == name
        np.testing.assert_array_equal(bits(decode_embeddings(answers[name])), bits(np.asarray(want)))


# -- what does not import Ray --------------------------------------------------------------------------


def test_jepa_and_jepa_server_never_import_ray() -> None:
    code = ("import sys, jepa, jepa_server.app, jepa_server.__main__; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'starlette')))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
