"""World-model planning, engine-agnostic and numpy only: robot pose math, rollout drivers and the
two CEM planners (V-JEPA 2-AC's and LeWM's), each exact to the upstream code.

Everything model-specific comes in as a callable: `predict` for the rollouts (the engine's,
jepa.world.predictor(ctx), or the tests' numpy reference), `energy` / `cost` for the planners. The
engine's rollouts and plans, frames or latents in, are jepa.world's."""

from __future__ import annotations

from .cem_ac import ac_cem
from .cem_lewm import lewm_cem
from .pose import ac_next_state, ac_pose_diff
from .rollout import ac_energy_fn, ac_rollout, lewm_cost, lewm_cost_fn, lewm_rollout, normalize_reps

__all__ = [
    "ac_cem",
    "ac_energy_fn",
    "ac_next_state",
    "ac_pose_diff",
    "ac_rollout",
    "lewm_cem",
    "lewm_cost",
    "lewm_cost_fn",
    "lewm_rollout",
    "normalize_reps",
]
