"""The Kubernetes manifests and the Ray image, checked without a cluster or a Docker engine: they parse,
carry what docs/scale-out.md promises (readiness on /health, the models from a read-only volume,
non-root, auth from a Secret, TLS in front, a ClusterIP Service), their jepa-server flags are the
server's own, and the RayService's serve config passes Ray's own schema and the application builder."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_deploy_files import _final_stage, _instructions

from jepa_server.settings import build_parser

from conftest import ROOT

K8S = ROOT / "deploy" / "k8s"


def _docs(name: str) -> dict[str, dict[str, Any]]:
    """The manifest's objects by kind."""
    docs = [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), "one object per kind"
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"], d["kind"]
    return by_kind


def _container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (c,) = pod_spec["containers"]
    return c


def _mounted_read_only(pod_spec: dict[str, Any], path: str) -> None:
    c = _container(pod_spec)
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == path)
    assert mount["readOnly"] is True
    volume = next(v for v in pod_spec["volumes"] if v["name"] == mount["name"])
    assert volume["persistentVolumeClaim"]["readOnly"] is True


def _key_from_secret(c: dict[str, Any]) -> None:
    env = {e["name"]: e for e in c["env"]}
    assert "secretKeyRef" in env["JEPA_API_KEY"]["valueFrom"]


def _cpus(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


# -- jepa-server: Deployment + Service + HorizontalPodAutoscaler -------------------------------------


def test_the_deployment_serves_on_ready_models_from_a_read_only_volume() -> None:
    k = _docs("jepa-server.yaml")
    assert {"Deployment", "Service", "HorizontalPodAutoscaler"} <= set(k)
    dep = k["Deployment"]
    pod = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    spec = pod["spec"]
    c = _container(spec)
    # the flags are jepa-server's own (its parser), the model is on the read-only volume
    flags = vars(build_parser().parse_args(c["args"]))
    assert flags["host"] == "0.0.0.0"  # a pod is reached on its address: loopback-only is impossible
    models = flags["model"] if isinstance(flags["model"], str) else flags["model"][0]
    assert str(models).startswith("/models/")
    port = next(p["containerPort"] for p in c["ports"] if p["name"] == "http")
    assert flags["port"] == port
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health" and c[probe]["httpGet"]["port"] in ("http", port)
    _mounted_read_only(spec, "/models")
    # threads = the CPU limit: one context on the pod's CPUs, never oversubscribed
    limits, requests = c["resources"]["limits"], c["resources"]["requests"]
    assert flags["threads"] * flags.get("workers", 1) == _cpus(limits["cpu"]) and requests == limits
    assert spec["securityContext"]["runAsNonRoot"] is True
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    _key_from_secret(c)
    assert spec["terminationGracePeriodSeconds"] > 20  # > --shutdown-timeout-s: in-flight requests finish


def test_the_service_and_the_autoscaler_point_at_the_deployment() -> None:
    k = _docs("jepa-server.yaml")
    dep, svc, hpa = k["Deployment"], k["Service"], k["HorizontalPodAutoscaler"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["type"] == "ClusterIP"  # the outside world comes through TLS (ingress.yaml)
    assert svc["spec"]["selector"].items() <= labels.items()
    c = _container(dep["spec"]["template"]["spec"])
    names = {p["name"] for p in c["ports"]}
    assert all(p["targetPort"] in names for p in svc["spec"]["ports"])
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", dep["metadata"]["name"])
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert any(m["type"] == "Resource" and m["resource"]["name"] == "cpu" for m in hpa["spec"]["metrics"])


def test_tls_is_terminated_in_front() -> None:
    ing = _docs("ingress.yaml")["Ingress"]
    assert ing["spec"]["tls"] and ing["spec"]["tls"][0]["secretName"]
    backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == _docs("jepa-server.yaml")["Service"]["metadata"]["name"]
    for doc in ("jepa-server.yaml", "rayservice.yaml"):
        text = (K8S / doc).read_text()
        assert "TLS" in text and "ClusterIP" in text, doc  # each says how to put auth and TLS in front


# -- the Ray application: KubeRay RayService -----------------------------------------------------------


@pytest.mark.ray
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_rayservice_deploys_the_application() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import ray
        from ray.serve.schema import ServeDeploySchema

        from jepa_server.ray.spec import ReplicaSpec

    rs = _docs("rayservice.yaml")["RayService"]
    assert rs["apiVersion"] == "ray.io/v1"
    cluster = rs["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == ray.__version__  # the image's Ray is the pinned one
    serve_config = ServeDeploySchema.model_validate(yaml.safe_load(rs["spec"]["serveConfigV2"]))
    (application,) = serve_config.applications
    assert application.import_path == "jepa_server.ray:app"
    spec = ReplicaSpec.from_args(application.args)  # the builder accepts its args
    assert str(spec.settings["model"]).startswith("/models/")
    (dep,) = application.deployments
    assert dep.ray_actor_options is not None
    replica_cpus = dep.ray_actor_options.num_cpus
    assert replica_cpus is not None
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # no replica on the head
    for group in cluster["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        c = _container(pod)
        node_cpus = float(group["rayStartParams"]["num-cpus"])
        assert node_cpus == _cpus(c["resources"]["limits"]["cpu"])
        assert node_cpus >= replica_cpus  # a replica fits on a worker
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        _mounted_read_only(pod, "/models")
        assert pod["securityContext"]["runAsNonRoot"] is True
    for c in [_container(head["template"]["spec"])] + [
        _container(g["template"]["spec"]) for g in cluster["workerGroupSpecs"]
    ]:
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"] == "jepa_server.ray.proxy:middlewares"
        _key_from_secret(c)
        assert c["image"] == _container(head["template"]["spec"])["image"]  # one image everywhere


def test_the_ray_image() -> None:
    path = ROOT / "docker" / "ray" / "Dockerfile"
    ins = _instructions(path)
    stages = [a for w, a in ins if w == "FROM"]
    assert len(stages) >= 2 and " AS build" in stages[0]
    final = _final_stage(ins)
    words = {w for w, _ in final}
    assert {"USER", "VOLUME", "EXPOSE", "ENV", "HEALTHCHECK"} <= words
    assert next(a for w, a in final if w == "USER") not in ("root", "0")
    assert "/models" in next(a for w, a in final if w == "VOLUME")
    assert not any(w in ("COPY", "ADD") and ".gguf" in a for w, a in ins)
    assert any("[ray]" in a for w, a in final if w == "RUN")
    assert any("RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=jepa_server.ray.proxy:middlewares" in a
               for w, a in final if w == "ENV")  # fmt: skip
    # the Ray base image is the version the extra pins
    text = path.read_text()
    assert "ARG RAY_VERSION=2.60.0" in text and 'ray[serve]==2.60.0"' in (ROOT / "pyproject.toml").read_text()
    assert "JEPA_NATIVE=OFF" in text


@pytest.mark.parametrize("doc", ["jepa-server.yaml", "rayservice.yaml", "ingress.yaml"])
def test_every_manifest_is_named_in_the_docs(doc: str) -> None:
    assert f"deploy/k8s/{doc}" in (ROOT / "docs" / "scale-out.md").read_text()


def test_no_manifest_exposes_a_load_balancer() -> None:
    for path in sorted(Path(K8S).glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            if d and d["kind"] == "Service":
                assert d["spec"].get("type", "ClusterIP") == "ClusterIP", path.name
