"""The LeWM planner: stable_worldmodel's `CEMSolver` (the one LeWM's evaluation instantiates),
engine-agnostic.

Per iteration: candidates = draws * var + mean (draws [num_samples, horizon, A] standard normal),
candidate 0 := the mean; the cost callable ranks them; the new mean is the mean of the top-k
(smallest cost) and the new "var" their unbiased std (the solver calls it var but scales the draws
by it). No momentum, no clipping: the action space is the z-scored one. The plan is the final mean.
Arithmetic is float32 as upstream, so a run fed with upstream's recorded draws and costs
reproduces its plan to float32 rounding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InvalidInputError
from .cem_ac import CemLog, elite_mean, standard_normal_draws, unbiased_std

CostFn = Callable[[np.ndarray], np.ndarray]


# The same keyword-only shape as ac_cem on purpose: each planner keeps its upstream's own option
# names and defaults (stable_worldmodel's CEMSolver here, Meta's cem() there), so neither is renamed.
def lewm_cem(
    cost: CostFn,
    *,
    action_dim: int,
    horizon: int = 5,
    num_samples: int = 300,
    topk: int = 30,
    n_steps: int = 30,
    var_scale: float = 1.0,
    init_action: np.ndarray | None = None,
    seed: int = 0,
    noise: np.ndarray | None = None,
    trace: bool = False,
) -> dict[str, Any]:
    """Plan `horizon` action blocks of `action_dim` numbers (frameskip x env action dim) with the
    cross-entropy method; defaults are LeWM's eval solver config (horizon: the PushT plan config).

    cost(candidates[num_samples, horizon, action_dim]) -> [num_samples], lower is better (for LeWM
    `JEPA.get_cost`; see `lewm_cost_fn`).
    init_action: [T0 <= horizon, action_dim] warm start of the mean (the rest starts at 0).
    noise: standard-normal draws [n_steps, num_samples, horizon, action_dim] to replay, e.g. the
    ones upstream's solver drew; without it they come from numpy's PCG64 seeded with `seed`.

    Returns {"actions": [horizon, action_dim], "cost_per_iteration": [n_steps] (mean cost of each
    iteration's elites, as the solver logs it)}; with trace=True also "candidates" [n_steps,
    num_samples, horizon, action_dim], "costs" [n_steps, num_samples], "topk" [n_steps, topk], and
    the "mean" and "var" [n_steps, horizon, action_dim] after each iteration."""
    if not 2 <= topk <= num_samples:
        raise InvalidInputError(
            f"unsupported topk={topk} (num_samples={num_samples}; the unbiased std needs 2)", param="topk"
        )
    if horizon < 1 or n_steps < 1 or action_dim < 1:
        bad = "horizon" if horizon < 1 else "n_steps" if n_steps < 1 else "action_dim"
        raise InvalidInputError(f"unsupported horizon={horizon}, n_steps={n_steps}, action_dim={action_dim}",
                                param=bad)
    noise = standard_normal_draws(noise, (n_steps, num_samples, horizon, action_dim), seed)

    f32 = np.float32
    mean = np.zeros((horizon, action_dim), dtype=f32)
    if init_action is not None:
        init = np.asarray(init_action, dtype=f32)
        if init.ndim != 2 or init.shape[0] > horizon or init.shape[1] != action_dim:
            want = f"[<= {horizon}, {action_dim}]"
            got = list(init.shape)
            raise InvalidInputError(f"init_action: expected {want}, got {got}", param="init_action")
        mean[: len(init)] = init
    var = np.full((horizon, action_dim), var_scale, dtype=f32)
    log = CemLog("cost", n_steps, num_samples, topk)
    for it in range(n_steps):
        cand = (noise[it] * var + mean).astype(f32)
        cand[0] = mean
        c, idx = log.rank(cost, cand)
        mean, var = elite_mean(cand[idx]), unbiased_std(cand[idx])
        log.record(it, c, idx, candidates=cand, costs=c, topk=idx, mean=mean, var=var)

    return log.result(mean.copy(), trace)
