"""The bundles' CEM runs: the planner options they were made with, and the check that a traced run
replays them (same per-sample values, same elites, same running statistics, same plan)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .compare import assert_rel_close

# Per planner: the per-sample value, the traced statistics (jepa.planning's names = upstream's
# golden names after "cem_"), and the golden plan.
_TRACE = {
    "ac": ("energy", "energies", ("samples", "mean", "std"), "cem_action"),
    "lewm": ("costs", "costs", ("candidates", "mean", "var"), "cem_actions"),
}
_AC_KEYS = (
    "samples",
    "topk",
    "cem_steps",
    "momentum_mean",
    "momentum_mean_gripper",
    "momentum_std",
    "momentum_std_gripper",
    "maxnorm",
)


def cem_options(bundle: Path, kind: str) -> dict[str, Any]:
    """jepa.planning.ac_cem / lewm_cem options from the bundle's hparams.json (without `noise`)."""
    hp = json.loads((bundle / "hparams.json").read_text())
    if kind == "ac":
        mpc = hp["mpc_args"]
        return {"horizon": mpc["rollout"], **{k: mpc[k] for k in _AC_KEYS}}
    cem = hp["cem"]
    return {k: cem[k] for k in ("horizon", "num_samples", "topk", "n_steps", "var_scale")}


def cem_golden(bundle: Path, kind: str) -> dict[str, np.ndarray]:
    """The bundle's recorded run: cem_noise, the per-sample values, cem_topk, the statistics and the
    plan, one environment (LeWM's n_envs axis dropped)."""
    value, _, stats, plan = _TRACE[kind]
    names = ("cem_noise", f"cem_{value}", "cem_topk", *(f"cem_{s}" for s in stats))
    env = (lambda a: a) if kind == "ac" else (lambda a: a[:, 0])
    out = {n: env(np.load(bundle / f"{n}.npy")) for n in names}
    out["plan"] = np.load(bundle / f"{plan}.npy") if kind == "ac" else np.load(bundle / f"{plan}.npy")[0]
    return out


def assert_cem_replays(
    out: dict[str, Any], golden: dict[str, np.ndarray], kind: str, *, tol: float = 1e-5
) -> None:
    """A traced plan (trace=True, the golden's noise) against the bundle's: values within rtol, the
    elites exactly, statistics and plan within atol."""
    value, traced, stats, _ = _TRACE[kind]
    assert_rel_close(out[traced], golden[f"cem_{value}"], f"cem_{value}", rtol=tol)
    np.testing.assert_array_equal(out["topk"], golden["cem_topk"])
    for key in stats:
        np.testing.assert_allclose(out[key], golden[f"cem_{key}"], rtol=0, atol=tol, err_msg=key)
    np.testing.assert_allclose(out["actions"], golden["plan"], rtol=0, atol=tol)
