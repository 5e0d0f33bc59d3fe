"""A Ray deployment's arguments, split into jepa-server settings and Ray Serve's deployment options.

`serve run jepa_server.ray:app model=m.gguf max_batch=16 num_replicas=2` and a serve config's
`args:` both arrive here as one flat mapping (strings from the command line, typed values from
YAML). Every name of `jepa_server.settings.Settings` is a setting, checked by the settings' own
parser (the same types, ranges and messages as jepa-server's flags); the names below are the
deployment's. Nothing here imports Ray: the split is tested without a cluster."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jepa

from ..settings import Settings, SettingsError, env_name

# Ray's, not the server's: how many replicas and what each one holds.
DEPLOYMENT_ARGS: dict[str, type] = {
    "num_replicas": int,  # a fixed count (ignored when autoscaling: min/max_replicas)
    "min_replicas": int,  # with max_replicas: autoscaling on ongoing requests per replica
    "max_replicas": int,
    "target_ongoing_requests": float,
    "max_ongoing_requests": int,  # requests a replica holds at once (its batches are formed from them)
    "num_cpus": float,  # per replica; also its graph threads unless `threads` is given
    "num_gpus": float,
    "health_check_period_s": float,  # how often Ray asks a replica's /health (default 10 s)
    "health_check_timeout_s": float,
}
# Settings that have no meaning in a replica: Ray's proxy owns the listening socket (http_options).
NOT_IN_A_REPLICA = {
    "host": "Ray Serve's proxy listens for the deployment (http_options: host, port)",
    "port": "Ray Serve's proxy listens for the deployment (http_options: host, port)",
}
# A replica holds this many requests at once by default (Ray's default of 5 would cap its batches).
MIN_ONGOING = 16


@dataclass(frozen=True)
class ReplicaSpec:
    """The checked split: `settings` (names and values as given, replayed in each replica through
    Settings.from_mapping) and the deployment's own values."""

    settings: dict[str, Any]
    deployment: dict[str, Any]

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> ReplicaSpec:
        """Split and check; raises SettingsError naming the bad argument."""
        settings: dict[str, Any] = {}
        deployment: dict[str, Any] = {}
        for key, value in args.items():
            name = key.replace("-", "_")
            if name in NOT_IN_A_REPLICA:
                raise SettingsError(f"{key} is not a replica's setting: {NOT_IN_A_REPLICA[name]}")
            if name in DEPLOYMENT_ARGS:
                deployment[name] = _deployment_value(name, value)
            else:
                settings[name] = value
        parsed = Settings.from_mapping(settings, "the deployment's arguments")  # unknown names refused
        if not (parsed.model or parsed.demo or getattr(parsed, "models_dir", None)):
            raise SettingsError(
                "no model: give model=PATH (a GGUF file on every node), models_dir=DIR, or demo=true"
            )
        _check_deployment(deployment)
        return cls(settings, deployment)

    def parsed(self) -> Settings:
        return Settings.from_mapping(self.settings, "the deployment's arguments")

    @property
    def num_cpus(self) -> float:
        return float(self.deployment.get("num_cpus", 1.0))

    @property
    def num_gpus(self) -> float:
        default = 0.0 if self.parsed().gpu is None else 1.0
        return float(self.deployment.get("num_gpus", default))

    def deployment_options(self) -> dict[str, Any]:
        """Keyword arguments for Deployment.options(): resources, replica count or autoscaling, the
        requests a replica takes at once, and a shutdown as long as the server's own."""
        s = self.parsed()
        d = self.deployment
        options: dict[str, Any] = {
            "ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus},
            "max_ongoing_requests": d.get("max_ongoing_requests", max(MIN_ONGOING, 2 * s.max_batch)),
            # Ray waits this long for in-flight requests before it stops a replica: the server's own
            # --shutdown-timeout-s, plus the few seconds its workers take to leave their graphs.
            "graceful_shutdown_timeout_s": s.shutdown_timeout_s + 5.0,
        }
        for name in ("health_check_period_s", "health_check_timeout_s"):
            if name in d:
                options[name] = d[name]
        if "min_replicas" in d or "max_replicas" in d:
            options["autoscaling_config"] = {
                "min_replicas": d.get("min_replicas", 1),
                "max_replicas": d.get("max_replicas", max(1, d.get("min_replicas", 1))),
                "target_ongoing_requests": d.get("target_ongoing_requests", float(s.max_batch)),
            }
        else:
            options["num_replicas"] = d.get("num_replicas", 1)
        return options


def replica_settings(
    spec_settings: Mapping[str, Any], cpus: float, gpus: list[int], env: Mapping[str, str] | None = None
) -> Settings:
    """The settings one replica serves with. As in jepa-server, the arguments win over JEPA_<NAME>
    variables of the replica's environment (a Kubernetes Secret's JEPA_API_KEY stays out of the serve
    config). Then, given what Ray assigned the replica: unless told otherwise, its graphs use the CPUs
    it was given (the node's core count would oversubscribe a shared node), and a replica given a
    GPU runs on it (Ray makes the assigned device the process's CUDA device 0). Ray's CPUs are a
    reservation, not a limit: the threads are capped by what the process may use (jepa.default_threads:
    its affinity, then its cgroup's quota), so a replica given more than its container allows does not
    oversubscribe it."""
    env = os.environ if env is None else env
    values = {**from_env(env), **spec_settings}
    if "threads" not in values:
        workers = int(values.get("workers", 1))
        values["threads"] = max(1, math.floor(min(cpus, jepa.default_threads()) / max(1, workers)))
    if "prep_threads" not in values:
        values["prep_threads"] = max(1, min(4, math.ceil(cpus)))
    if gpus and values.get("gpu") is None:
        values["gpu"] = 0
    return Settings.from_mapping(values, "the deployment's arguments")


def from_env(env: Mapping[str, str]) -> dict[str, str]:
    """JEPA_<NAME> values of the settings that take one (jepa-server's environment names)."""
    out = {}
    for f in dataclasses.fields(Settings):
        key = env_name(f.name)
        if f.metadata.get("env") and key in env and f.name not in NOT_IN_A_REPLICA:
            out[f.name] = env[key]
    return out


def _deployment_value(name: str, value: Any) -> Any:
    want = DEPLOYMENT_ARGS[name]
    if isinstance(value, bool):
        raise SettingsError(f"{name} must be {want.__name__}, got {value!r}")
    try:
        out = want(value.strip()) if isinstance(value, str) else want(value)
    except (TypeError, ValueError):
        raise SettingsError(f"{name} must be {want.__name__}, got {value!r}") from None
    if want is int and isinstance(value, float) and not value.is_integer():
        raise SettingsError(f"{name} must be int, got {value!r}")
    return out


def _check_deployment(d: Mapping[str, Any]) -> None:
    checks = [
        (d.get("num_replicas", 1) < 1, "num_replicas must be at least 1"),
        (d.get("min_replicas", 0) < 0, "min_replicas must be 0 or more"),
        (d.get("max_replicas", 1) < 1, "max_replicas must be at least 1"),
        (d.get("min_replicas", 0) > d.get("max_replicas", math.inf),
         "min_replicas must be at most max_replicas"),
        (d.get("target_ongoing_requests", 1.0) <= 0, "target_ongoing_requests must be positive"),
        (d.get("max_ongoing_requests", 1) < 1, "max_ongoing_requests must be at least 1"),
        (d.get("num_cpus", 1.0) < 0, "num_cpus must be 0 or more"),
        (d.get("num_gpus", 0.0) < 0, "num_gpus must be 0 or more"),
        (d.get("health_check_period_s", 1.0) <= 0, "health_check_period_s must be positive"),
        (d.get("health_check_timeout_s", 1.0) <= 0, "health_check_timeout_s must be positive"),
    ]
    for bad, message in checks:
        if bad:
            raise SettingsError(message)
