"""The two CEM planners replayed with upstream's recorded draws and energies / costs: the sampled
candidates, the elites, the running mean and std and the plan must come out as upstream's."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from jepa.planning import ac_cem, lewm_cem

from conftest import AC_BUNDLE, LEWM_BUNDLE
from numpy_reference import cem_options

AC, LEWM = AC_BUNDLE, LEWM_BUNDLE
TOL = 1e-5

# The mpc_args / CEMSolver settings the bundles were made with (their hparams.json).
AC_ARGS = cem_options(AC, "ac")
LEWM_ARGS = {"action_dim": 10, **cem_options(LEWM, "lewm")}


class Recorded:
    """An energy/cost callable that checks the candidates it is given against upstream's, then
    answers upstream's recorded values, iteration by iteration."""

    def __init__(self, candidates: np.ndarray, values: np.ndarray) -> None:
        self.candidates, self.values = candidates, values
        self.it: Iterator[int] = iter(range(len(values)))

    def __call__(self, cand: np.ndarray) -> np.ndarray:
        i = next(self.it)
        np.testing.assert_allclose(cand, self.candidates[i], rtol=0, atol=TOL,
                                   err_msg=f"candidates of iteration {i}")
        return self.values[i]


def test_ac_cem_replays_the_upstream_plan() -> None:
    g = {n: np.load(AC / f"{n}.npy") for n in ("cem_noise", "cem_samples", "cem_energy", "cem_topk",
                                                "cem_mean", "cem_std", "cem_action")}
    energy = Recorded(g["cem_samples"], g["cem_energy"])
    out = ac_cem(energy, noise=g["cem_noise"], trace=True, **AC_ARGS)
    assert next(energy.it, None) is None  # one call per iteration
    np.testing.assert_array_equal(out["topk"], g["cem_topk"])
    for key, ref in (("samples", "cem_samples"), ("mean", "cem_mean"), ("std", "cem_std")):
        np.testing.assert_allclose(out[key], g[ref], rtol=0, atol=TOL, err_msg=key)
    np.testing.assert_allclose(out["actions"], g["cem_action"], rtol=0, atol=TOL)
    assert out["actions"].shape == (2, 7) and out["actions"].dtype == np.float32
    elite_energy = np.take_along_axis(g["cem_energy"], g["cem_topk"], axis=1).mean(axis=1)
    np.testing.assert_allclose(out["energy_per_iteration"], elite_energy, rtol=1e-6)


def test_lewm_cem_replays_the_upstream_plan() -> None:
    g = {n: np.load(LEWM / f"{n}.npy")[:, 0] for n in ("cem_noise", "cem_candidates", "cem_costs", "cem_topk",
                                                       "cem_mean", "cem_var")}  # n_envs axis dropped
    actions = np.load(LEWM / "cem_actions.npy")[0]
    cost = Recorded(g["cem_candidates"], g["cem_costs"])
    out = lewm_cem(cost, noise=g["cem_noise"], trace=True, **LEWM_ARGS)
    assert next(cost.it, None) is None
    np.testing.assert_array_equal(out["topk"], g["cem_topk"])
    for key, ref in (("candidates", "cem_candidates"), ("mean", "cem_mean"), ("var", "cem_var")):
        np.testing.assert_allclose(out[key], g[ref], rtol=0, atol=TOL, err_msg=key)
    np.testing.assert_allclose(out["actions"], actions, rtol=0, atol=TOL)
    elite_cost = np.take_along_axis(g["cem_costs"], g["cem_topk"], axis=1).mean(axis=1)
    np.testing.assert_allclose(out["cost_per_iteration"], elite_cost, rtol=1e-6)


def _quadratic(target: np.ndarray):
    return lambda cand: ((cand - target) ** 2).reshape(len(cand), -1).sum(axis=1)


def test_ac_seed_gives_the_same_plan_and_is_the_documented_generator() -> None:
    target = np.zeros((2, 7), np.float32)
    target[:, :3], target[:, 6] = 0.03, 0.5
    f = _quadratic(target)
    a, b = ac_cem(f, seed=7, cem_steps=3), ac_cem(f, seed=7, cem_steps=3)
    np.testing.assert_array_equal(a["actions"], b["actions"])
    assert not np.array_equal(a["actions"], ac_cem(f, seed=8, cem_steps=3)["actions"])
    noise = np.random.default_rng(7).standard_normal((3, 2, 25, 4), dtype=np.float32)
    np.testing.assert_array_equal(ac_cem(f, noise=noise, cem_steps=3)["actions"], a["actions"])


def test_ac_samples_are_clamped_rotation_free_and_the_gripper_rounded() -> None:
    out = ac_cem(lambda c: -np.abs(c).sum(axis=(1, 2)), samples=40, topk=5, cem_steps=2, maxnorm=0.05,
                 gripper_clamp=0.5, trace=True, seed=3)
    s = out["samples"]
    assert np.abs(s[..., :3]).max() <= np.float32(0.05) and np.abs(s[..., 6]).max() <= 0.5
    assert not s[..., 3:6].any() and not out["actions"][:, 3:6].any()
    small = ac_cem(lambda c: np.abs(c[:, :, 6] - 0.2).sum(axis=1), samples=40, topk=5, cem_steps=4, seed=0)
    assert small["actions"][0, 6] == 0.0  # |gripper| < 0.25 is rounded to 0


def test_lewm_seed_and_warm_start() -> None:
    target = np.full((5, 4), 0.3, np.float32)
    f = _quadratic(target)
    a = lewm_cem(f, action_dim=4, num_samples=64, topk=8, n_steps=6, seed=1)
    np.testing.assert_array_equal(a["actions"], lewm_cem(f, action_dim=4, num_samples=64, topk=8, n_steps=6,
                                                         seed=1)["actions"])
    assert a["cost_per_iteration"][-1] < 0.5 * a["cost_per_iteration"][0]  # it does optimise
    warm = lewm_cem(f, action_dim=4, num_samples=8, topk=2, n_steps=1, init_action=target[:2], trace=True)
    np.testing.assert_array_equal(warm["candidates"][0, 0, :2], target[:2])  # candidate 0 is the mean
    assert not warm["candidates"][0, 0, 2:].any()


def test_bad_arguments_are_named() -> None:
    f = _quadratic(np.zeros((2, 7), np.float32))
    with pytest.raises(ValueError, match=r"noise: expected \[2, 2, 25, 4\]"):
        ac_cem(f, noise=np.zeros((2, 2, 25, 3)))
    with pytest.raises(ValueError, match="topk=30"):
        ac_cem(f, topk=30)
    with pytest.raises(ValueError, match=r"energy: expected \[25\] values"):
        ac_cem(lambda c: np.zeros(3))
    with pytest.raises(ValueError, match=r"cost: expected \[8\] values"):
        lewm_cem(lambda c: np.zeros(3), action_dim=2, num_samples=8, topk=2)
    with pytest.raises(ValueError, match="init_action"):
        lewm_cem(f, action_dim=2, horizon=2, num_samples=8, topk=2, init_action=np.zeros((3, 2)))
