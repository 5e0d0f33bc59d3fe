"""World-model predictor kinds as data: one record per kind the engine runs (the file's
jepa.pred.kind), holding everything that differs between V-JEPA 2-AC and LeWM.

jepa.world (latents, rollouts, plans), Model.world_model, jepa.pooling and the server's /rollout
parser and budgets read these records; none of them branches on a kind's name
(tests/test_world_kinds.py holds them to it). A new kind is a new record here."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import planning
from ._engine import PredictorKind
from .errors import UnsupportedError
from .planning.rollout import ACFramesFn

if TYPE_CHECKING:
    from ._engine import ModelInfo
    from .model import Context, Model


@dataclass(frozen=True)
class Steps:
    """The engine's predictor as a kind's rollout and plan drive it (jepa.world builds it, with the
    caller's `stop` asked before every step)."""

    predict: Callable[..., np.ndarray]  # one predictor call (Context.world_predict)
    frames: ACFramesFn | None  # a whole cached rollout (Context.world_rollout); None: step by step


# (ctx, prepared frames [N, 3, S, S]) -> the predictor's latents, one per frame
LatentsFn = Callable[["Context", np.ndarray], np.ndarray]
# (ctx, steps, context, actions [K, H, A], goal or None, state or None, return_latents) -> the answer
RolloutFn = Callable[
    ["Context", Steps, np.ndarray, np.ndarray, "np.ndarray | None", "np.ndarray | None", bool], dict[str, Any]
]
# (ctx, steps, context, goal, state or None) -> the planner's objective: candidates -> [S], lower is better
ObjectiveFn = Callable[
    ["Context", Steps, np.ndarray, np.ndarray, "np.ndarray | None"], Callable[[np.ndarray], np.ndarray]
]

# The plan options whose product is a plan's predictor work (samples x horizon x CEM iterations), by
# their names in `plan_fields`.
WORK_FIELDS = ("samples", "horizon", "cem_steps")


@dataclass(frozen=True)
class WorldKind:
    name: str  # jepa.pred.kind as the file spells it: Model.world_model, the /rollout answer's "kind"
    pred_kind: PredictorKind
    title: str  # the kind in messages
    takes_state: bool  # True: a robot state is required (its pose chain); False: one is refused
    history: bool  # every context frame is history (True), or only the last one is the observation
    goal_ndim: int  # a goal latent's dimensions: one frame's tokens [HW, D] (2) or an embedding [D] (1)
    latents: LatentsFn
    rollout: RolloutFn
    objective: ObjectiveFn
    planner: Callable[..., dict[str, Any]]  # jepa.planning's CEM: its signature declares the options
    planner_args: Callable[[ModelInfo], dict[str, Any]]  # what the planner takes from the model
    # The plan options by the names /rollout's `plan` takes (Meta's) -> the planner's own, in the order
    # a refusal lists them; an option missing here is not this planner's.
    plan_fields: Mapping[str, str]
    latent_floats: Callable[[Model, int, int], int]  # return_latents' floats for K candidates of H steps
    pool: str | None  # the pool mode that is this kind's own embedding (jepa.pooling), if any

    def planner_default(self, option: str) -> Any:
        """A planner option's default, read from the planner's own signature (the one place it lives)."""
        return inspect.signature(self.planner).parameters[option].default

    def plan_work(self, options: Mapping[str, Any]) -> int:
        """Candidate-steps of the predictor a plan with these planner options runs (the planner's
        defaults for what is not given)."""
        work = 1
        for name in (self.plan_fields[f] for f in WORK_FIELDS):
            work *= int(options[name]) if name in options else int(self.planner_default(name))
        return work


def _no_args(info: ModelInfo) -> dict[str, Any]:
    return {}


# ---- V-JEPA 2-AC ---------------------------------------------------------------------------------
# AC and LEWM below name every field alike on purpose: they are two rows of one record type.


def _ac_latents(ctx: Context, x: np.ndarray) -> np.ndarray:
    """[N, HW, D]: each frame repeated to fill one tubelet, encoded on its own, then the non-affine
    LayerNorm (the AC world model's `encode`)."""
    clip = np.repeat(x[:, :, None], ctx.model.info.tubelet_size, axis=2)
    return ctx.world_latents(ctx.encode(np.ascontiguousarray(clip)))


def _ac_scores(ctx: Context, steps: Steps, z: np.ndarray, state: np.ndarray | None, actions: np.ndarray,
               goal: np.ndarray | None, return_latents: bool) -> dict[str, np.ndarray]:
    """planning.ac_rollout on the engine: its cached rollout when `steps` has one (predict is then
    not called), else upstream's loop over world_predict."""
    assert state is not None  # jepa.world.check_state requires it for a kind that takes one
    return planning.ac_rollout(steps.predict, z, state, actions, goal, return_latents=return_latents,
                               norm_eps=ctx.model.info.pred_norm_reps_eps, frames=steps.frames)


def _ac_rollout(ctx: Context, steps: Steps, z: np.ndarray, actions: np.ndarray, goal: np.ndarray | None,
                state: np.ndarray | None, return_latents: bool) -> dict[str, Any]:
    out: dict[str, Any] = dict(_ac_scores(ctx, steps, z, state, actions, goal, return_latents))
    out["best"] = int(np.argmin(out["energies"][:, -1]))
    return out


def _ac_objective(ctx: Context, steps: Steps, z: np.ndarray, goal: np.ndarray,
                  state: np.ndarray | None) -> Callable[[np.ndarray], np.ndarray]:
    """The L1 energy of each trajectory's last predicted frame to the goal."""
    return lambda trajs: _ac_scores(ctx, steps, z, state, trajs, goal, False)["energies"][:, -1]


def _ac_latent_floats(model: Model, k: int, h: int) -> int:
    info = model.info
    crop = int(info.preprocess.crop) or int(info.img_size)
    per_frame = model.n_tokens(max(1, int(info.tubelet_size)), crop, crop) - model.n_prefix
    return k * h * per_frame * int(info.embed_dim)


AC = WorldKind(
    name="ac",
    pred_kind=PredictorKind.AC,
    title="V-JEPA 2-AC",
    takes_state=True,
    history=False,
    goal_ndim=2,
    latents=_ac_latents,
    rollout=_ac_rollout,
    objective=_ac_objective,
    planner=planning.ac_cem,
    planner_args=_no_args,
    plan_fields={k: k for k in ("samples", "topk", "cem_steps", "horizon", "seed", "maxnorm",
                                "gripper_clamp")},
    latent_floats=_ac_latent_floats,
    pool=None,
)


# ---- LeWM ----------------------------------------------------------------------------------------


def _lewm_latents(ctx: Context, x: np.ndarray) -> np.ndarray:
    """[N, D]: the CLS through the projector (LeWM's `JEPA.encode`)."""
    return ctx.world_latents(ctx.encode(x))[:, 0]


def _lewm_rollout(ctx: Context, steps: Steps, hist: np.ndarray, actions: np.ndarray, goal: np.ndarray | None,
                  state: np.ndarray | None, return_latents: bool) -> dict[str, Any]:
    """LeWM's window slides: it has nothing to cache, so `steps.frames` goes unused."""
    tgt = hist[-1] if goal is None else goal
    window = ctx.model.info.pred_n_frames
    costs = planning.lewm_cost(steps.predict, hist, tgt, actions, window=window)
    res: dict[str, Any] = {"costs": costs, "best": int(np.argmin(costs))}
    if return_latents:
        res["latents"] = planning.lewm_rollout(steps.predict, hist, actions, window=window)
    return res


def _lewm_objective(ctx: Context, steps: Steps, hist: np.ndarray, goal: np.ndarray,
                    state: np.ndarray | None) -> Callable[[np.ndarray], np.ndarray]:
    """`JEPA.get_cost` of each candidate."""
    return planning.lewm_cost_fn(steps.predict, hist, goal, window=ctx.model.info.pred_n_frames)


def _lewm_planner_args(info: ModelInfo) -> dict[str, Any]:
    return {"action_dim": info.pred_action_dim}


def _lewm_latent_floats(model: Model, k: int, h: int) -> int:
    info = model.info
    return k * (h + 1) * max(int(info.wm_embed_dim), int(info.embed_dim))


LEWM = WorldKind(
    name="lewm",
    pred_kind=PredictorKind.LEWM,
    title="LeWM",
    takes_state=False,
    history=True,
    goal_ndim=1,
    latents=_lewm_latents,
    rollout=_lewm_rollout,
    objective=_lewm_objective,
    planner=planning.lewm_cem,
    planner_args=_lewm_planner_args,
    plan_fields={"samples": "num_samples", "topk": "topk", "cem_steps": "n_steps", "horizon": "horizon",
                 "seed": "seed"},
    latent_floats=_lewm_latent_floats,
    pool="lewm",
)


# ---- the table -----------------------------------------------------------------------------------

WORLD_KINDS: dict[str, WorldKind] = {k.name: k for k in (AC, LEWM)}


def kind_of(model: Model) -> WorldKind | None:
    """The model's world-model kind, or None when it is not a world model."""
    return WORLD_KINDS.get(model.world_model)


def lookup(model: Model, what: str) -> WorldKind:
    """The model's world-model kind; UnsupportedError naming `what` when it is not a world model."""
    kind = kind_of(model)
    if kind is None:
        raise UnsupportedError(f"{what}: {model!r} is not a world model (no LeWM or V-JEPA 2-AC predictor)")
    return kind


def kind_pool(model: Model) -> str | None:
    """The pool mode that is the model's own world-model embedding (LeWM's), or None."""
    kind = kind_of(model)
    return None if kind is None else kind.pool

