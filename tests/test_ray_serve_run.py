"""`serve run` on the shipped config, the way a Ray user starts it: Ray's own CLI starts a local
cluster, deploys docker/ray/serve.yaml (its model and port replaced with this test's), and the
application answers /health, /v1/models and a refusal in the envelope; SIGINT stops it all."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_server_support import BIN, demo_path, http

from conftest import ROOT

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_run_on_the_shipped_config(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "docker" / "ray" / "serve.yaml").read_text())
    port = _free_port()
    config["http_options"].update(host="127.0.0.1", port=port)
    config["proxy_location"] = "HeadOnly"
    app = config["applications"][0]
    app["args"]["model"] = demo_path()
    (dep,) = app["deployments"]
    dep["autoscaling_config"].update(min_replicas=1, max_replicas=1)
    dep["ray_actor_options"]["num_cpus"] = 1
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    # a cluster of its own: never one named by RAY_ADDRESS
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH="jepa_server.ray.proxy:middlewares",
               OPENBLAS_NUM_THREADS="1")  # fmt: skip
    serve = str(BIN / "serve") if (BIN / "serve").exists() else sys.executable
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([serve, "run", str(path)], stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 150
        health = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = http(url + "/health")
                if health.status == 200:
                    break
            except OSError:
                pass
            time.sleep(1)
        assert health is not None and health.status == 200, (tmp_path / "serve.log").read_text()[-3000:]
        assert health.json()["model"] == "demo-vit" and "x-jepa-replica" in health.headers
        models = http(url + "/v1/models")
        assert [m["id"] for m in models.json()["data"]] == ["demo-vit"]
        bad = http(url + "/v1/embeddings", "POST", {"input": [{"url": "http://example.com/a.png"}]})
        assert bad.status == 400 and set(bad.json()["error"]) == {"message", "type", "param", "code"}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # serve run shuts its cluster down on Ctrl-C
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
