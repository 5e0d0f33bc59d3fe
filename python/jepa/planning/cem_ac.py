"""The V-JEPA 2-AC planner: Meta's cross-entropy method (`mpc_utils.cem`), engine-agnostic.

Only x, y, z and the gripper are sampled (the rotation is held at 0). Per iteration every
trajectory is resampled, one standard-normal draw of [samples, 4] per horizon step, scaled by the
current std and shifted by the mean; xyz are clipped to ±maxnorm and the gripper to ±gripper_clamp.
The energy callable ranks the trajectories; the mean and unbiased std of the top-k (smallest
energy) are blended into the running mean/std with one momentum for the xyz lanes and another for
the gripper lane. The plan is the final mean, rotation 0, with a gripper below 0.25 in magnitude
set to 0 (`round_small_elements`). Arithmetic is float32 as upstream, so a run fed with upstream's
recorded draws and energies reproduces its plan to float32 rounding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InvalidInputError
from .pose import POSE_DIM

SAMPLED = 4  # x, y, z, gripper
GRIPPER_ROUND = 0.25

EnergyFn = Callable[[np.ndarray], np.ndarray]


def ac_candidates(noise: np.ndarray, mean: np.ndarray, std: np.ndarray, maxnorm: float,
                  gripper_clamp: float) -> np.ndarray:
    """Trajectories [samples, H, 7] from draws [H, samples, 4] and the running mean/std [H, 4]."""
    f32 = np.float32
    s = noise.astype(f32) * std[:, None, :] + mean[:, None, :]  # [H, S, 4]
    xyz = np.clip(s[..., :3], -f32(maxnorm), f32(maxnorm))
    grip = np.clip(s[..., 3:], -f32(gripper_clamp), f32(gripper_clamp))
    zeros = np.zeros((*s.shape[:2], 3), dtype=f32)
    return np.ascontiguousarray(np.concatenate([xyz, zeros, grip], axis=-1).transpose(1, 0, 2))


def elites(energies: np.ndarray, topk: int) -> np.ndarray:
    """Indices of the `topk` smallest energies, ascending (ties keep sample order)."""
    return np.argsort(energies, kind="stable")[:topk]


def unbiased_std(x: np.ndarray) -> np.ndarray:
    """std over axis 0 with N - 1, accumulated in float64 and returned in float32."""
    return x.astype(np.float64).std(axis=0, ddof=1).astype(np.float32)


def elite_mean(x: np.ndarray) -> np.ndarray:
    """mean over axis 0 in float32, summed in order as torch does for a few rows."""
    return (np.add.reduce(x.astype(np.float32), axis=0) / np.float32(len(x))).astype(np.float32)


def _blend(sel: np.ndarray, old: np.ndarray, m_xyz: float, m_grip: float) -> np.ndarray:
    """sel * (1 - m) + old * m per lane, with 1 - m taken in double then rounded (torch's scalars)."""
    keep = np.array([1.0 - m_xyz] * 3 + [1.0 - m_grip], dtype=np.float32)
    m = np.array([m_xyz] * 3 + [m_grip], dtype=np.float32)
    return (sel * keep + old * m).astype(np.float32)


def standard_normal_draws(noise: np.ndarray | None, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """The recorded draws when given (checked against `shape`), else a seeded generator's, float32."""
    if noise is None:
        return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    noise = np.asarray(noise, dtype=np.float32)
    if noise.shape != shape:
        raise InvalidInputError(f"noise: expected {list(shape)}, got {list(noise.shape)}", param="noise")
    return noise


def round_small(x: np.ndarray, threshold: float) -> np.ndarray:
    return np.where(np.abs(x) < np.float32(threshold), np.float32(0.0), x).astype(np.float32)


class CemLog:
    """What both planners do each iteration besides their own sampling and update: score the
    candidates (`what`: "energy" or "cost", the name errors and the answer give it), pick the elites,
    record the elites' mean score and, for the trace, the iteration's named arrays."""

    def __init__(self, what: str, n_steps: int, samples: int, topk: int) -> None:
        self.what, self.samples, self.topk = what, samples, topk
        self.per_iteration = np.empty(n_steps, dtype=np.float32)
        self.arrays: dict[str, list[np.ndarray]] = {}

    def rank(self, score: Callable[[np.ndarray], np.ndarray],
             candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """score(candidates) as float32 [samples], and the indices of its `topk` smallest (`elites`)."""
        s = np.asarray(score(candidates), dtype=np.float32).reshape(-1)
        if s.shape != (self.samples,):
            raise ValueError(f"{self.what}: expected [{self.samples}] values, got {list(s.shape)}")
        return s, elites(s, self.topk)

    def record(self, it: int, scores: np.ndarray, idx: np.ndarray, **arrays: np.ndarray) -> None:
        self.per_iteration[it] = scores[idx].mean(dtype=np.float64)
        for k, v in arrays.items():
            self.arrays.setdefault(k, []).append(v)

    def result(self, actions: np.ndarray, trace: bool) -> dict[str, Any]:
        """{"actions", "<what>_per_iteration"}, and with trace every recorded array stacked by name."""
        out: dict[str, Any] = {"actions": actions, f"{self.what}_per_iteration": self.per_iteration}
        if trace:
            out.update({k: np.stack(v) for k, v in self.arrays.items()})
        return out


def ac_cem(
    energy: EnergyFn,
    *,
    horizon: int = 2,
    samples: int = 25,
    topk: int = 10,
    cem_steps: int = 2,
    momentum_mean: float = 0.15,
    momentum_std: float = 0.75,
    momentum_mean_gripper: float = 0.15,
    momentum_std_gripper: float = 0.15,
    maxnorm: float = 0.075,
    gripper_clamp: float = 0.75,
    seed: int = 0,
    noise: np.ndarray | None = None,
    trace: bool = False,
) -> dict[str, Any]:
    """Plan `horizon` actions with the cross-entropy method; defaults are Meta's notebook's.

    energy(trajectories[samples, horizon, 7]) -> [samples], lower is better (for V-JEPA 2-AC, the
    L1 distance of the last predicted frame to the goal; see `ac_energy_fn`).
    noise: standard-normal draws [cem_steps, horizon, samples, 4] (x, y, z, gripper) to replay,
    e.g. the ones upstream drew; without it they come from numpy's PCG64 seeded with `seed`.

    Returns {"actions": [horizon, 7], "energy_per_iteration": [cem_steps] (mean energy of each
    iteration's elites)}; with trace=True also "samples" [cem_steps, samples, horizon, 7],
    "energies" [cem_steps, samples], "topk" [cem_steps, topk], and the running "mean" and "std"
    [cem_steps, horizon, 4] after each iteration."""
    if not 1 <= topk <= samples:
        raise InvalidInputError(f"unsupported topk={topk} (samples={samples})", param="topk")
    if topk < 2:
        raise InvalidInputError("unsupported topk=1: the elites' unbiased std needs two", param="topk")
    if horizon < 1 or cem_steps < 1:
        raise InvalidInputError(f"unsupported horizon={horizon}, cem_steps={cem_steps}",
                                param="horizon" if horizon < 1 else "cem_steps")
    noise = standard_normal_draws(noise, (cem_steps, horizon, samples, SAMPLED), seed)

    f32 = np.float32
    mean = np.zeros((horizon, SAMPLED), dtype=f32)
    std = np.concatenate([np.full((horizon, 3), maxnorm, f32), np.ones((horizon, 1), f32)], axis=-1)
    log = CemLog("energy", cem_steps, samples, topk)
    for it in range(cem_steps):
        trajs = ac_candidates(noise[it], mean, std, maxnorm, gripper_clamp)
        e, idx = log.rank(energy, trajs)
        sel = trajs[idx][..., [0, 1, 2, POSE_DIM - 1]]  # [topk, H, 4]
        mean = _blend(elite_mean(sel), mean, momentum_mean, momentum_mean_gripper)
        std = _blend(unbiased_std(sel), std, momentum_std, momentum_std_gripper)
        log.record(it, e, idx, samples=trajs, energies=e, topk=idx, mean=mean, std=std)

    actions = np.zeros((horizon, POSE_DIM), dtype=f32)
    actions[:, :3] = mean[:, :3]
    actions[:, 6] = round_small(mean[:, 3], GRIPPER_ROUND)
    return log.result(actions, trace)
