"""The Ray Serve deployment: each replica holds one loaded model and its worker contexts inside
jepa-server's own app (embedded.py), and forwards every HTTP request to it unchanged.

    serve run jepa_server.ray:app model=/models/vit-s16-f16.gguf num_replicas=2
    serve deploy docker/ray/serve.yaml

A replica is routed to only once its constructor returned: the model loaded, each worker ran its
warm graph, and /health answered 200 through the hop. Ray's health check asks the same /health."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import ray
from ray import serve
from ray.serve import Application
from starlette.requests import Request
from starlette.responses import Response

from .embedded import EmbeddedServer
from .export import EngineMetricsExport
from .spec import ReplicaSpec, replica_settings

log = logging.getLogger("jepa_server.ray")

# Every answer says which replica and node made it (a cluster's routing is otherwise invisible).
REPLICA_HEADER = "x-jepa-replica"
NODE_HEADER = "x-jepa-node"
# A replica's constructor waits this long for its model (a large file on a slow volume).
READY_TIMEOUT_S = 600.0


class JepaReplica:
    """One replica: the embedded server, and the hop to it."""

    _export: asyncio.Task[None] | None = None
    server: EmbeddedServer | None = None

    async def __init__(self, settings: Mapping[str, Any]) -> None:  # type: ignore[misc]  # Ray awaits it
        context = ray.get_runtime_context()
        cpus = float(context.get_assigned_resources().get("CPU", 1.0))
        gpus = [int(g) for g in ray.get_gpu_ids()]
        self.settings = replica_settings(settings, cpus, gpus)
        replica = serve.get_replica_context()
        self.replica = replica.replica_id.unique_id
        self.node = context.get_node_id()[:12]
        self.server = await EmbeddedServer.start(self.settings, READY_TIMEOUT_S)
        tags = {"replica": self.replica, "deployment": replica.deployment, "application": replica.app_name}
        exporter = EngineMetricsExport(self.server.metrics.registry, tags)
        self._export = asyncio.create_task(exporter.run(), name="jepa-ray-metrics")
        log.info("replica %s on node %s: ready (threads %d × workers %d)", self.replica, self.node,
                 self.settings.graph_threads, self.settings.workers)  # fmt: skip

    def _server(self) -> EmbeddedServer:
        assert self.server is not None, "a replica is routed to only once its constructor returned"
        return self.server

    async def __call__(self, request: Request) -> Response:
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        declared = _declared_length(request)
        if declared is not None and declared > self.settings.max_body_bytes:
            # Never read a body the app will refuse from its length (413): the app says so itself.
            body = b""
        else:
            declared = None
            body = await request.body()
        server = self._server()
        answer = await server.forward(request.method, path, request.headers.items(), body, declared)
        headers = [*answer.headers, (REPLICA_HEADER, self.replica), (NODE_HEADER, self.node)]
        response = Response(answer.body, status_code=answer.status)
        for key, value in headers:
            response.headers.append(key, value)
        return response

    async def check_health(self) -> None:
        """Ray's periodic check: the embedded server's /health must answer 200."""
        await self._server().check_health()

    async def __del__(self) -> None:  # Ray awaits an async destructor
        # Also after a constructor that failed half-way (its model did not load).
        if self._export is not None:
            self._export.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._export
        if self.server is not None:
            await self.server.close()


def _declared_length(request: Request) -> int | None:
    value = request.headers.get("content-length", "")
    return int(value) if value.isdigit() else None


# The deployment's defaults; `app` sets its replicas and resources from the arguments.
deployment = serve.deployment(name="jepa", health_check_period_s=10.0, health_check_timeout_s=30.0)(
    JepaReplica
)


def app(args: dict[str, Any]) -> Application:
    """The application builder `serve run jepa_server.ray:app key=value ...` and a serve config's
    `import_path: jepa_server.ray:app` call: every jepa-server setting by its name (model,
    models_dir, max_batch, max_wait_ms, threads, workers, api_key, ...), plus the deployment's
    num_replicas / min_replicas / max_replicas / target_ongoing_requests / max_ongoing_requests /
    num_cpus / num_gpus. A bad argument stops it here, before any replica starts."""
    spec = ReplicaSpec.from_args(args)
    return deployment.options(**spec.deployment_options()).bind(spec.settings)
