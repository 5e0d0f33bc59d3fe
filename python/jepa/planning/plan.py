"""The planners on a predictor: CEM over rollouts of a `predict` callable (the engine's, or the
numpy reference's)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cem_ac import ac_cem
from .cem_lewm import lewm_cem
from .rollout import LEWM_WINDOW, ACPredictFn, LeWMPredictFn, ac_energy_fn, lewm_cost_fn


def ac_plan(predict: ACPredictFn, context: np.ndarray, state: np.ndarray, goal: np.ndarray,
            **cem: Any) -> dict[str, Any]:
    """V-JEPA 2-AC: the next `horizon` actions from the context frame [HW, D], the robot state [7]
    and the goal frame [HW, D] (both normalised latents); `cem` takes `ac_cem`'s options."""
    return ac_cem(ac_energy_fn(predict, context, state, goal), **cem)


def lewm_plan(predict: LeWMPredictFn, history: np.ndarray, goal: np.ndarray, *, action_dim: int,
              window: int = LEWM_WINDOW, **cem: Any) -> dict[str, Any]:
    """LeWM: `horizon` action blocks from the history embeddings [Hh, D] and the goal embedding
    [D]; `cem` takes `lewm_cem`'s options."""
    return lewm_cem(lewm_cost_fn(predict, history, goal, window=window), action_dim=action_dim, **cem)
