"""World models on the engine: LeWM and V-JEPA 2-AC predictors, rollouts and CEM planners.

The engine runs the networks (encoder, projector, predictors); the rollouts and planners are
jepa.planning's, with the context's predictor as their `predict` callable, so there is one code
path for the step logic whatever runs the network. K candidates always travel on the batch axis;
on the CPU an item's rows do not depend on its batch, so a batched rollout equals K single ones bit
for bit. The `Context` methods of the same names call these functions."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from . import planning
from .errors import InvalidInputError, UnsupportedError

if TYPE_CHECKING:
    from .model import Context, Model


def _need(ctx: Context, kind: str, what: str) -> None:
    got = ctx.model.info.get("pred_kind", "")
    if got != kind:
        name = {"lewm": "LeWM", "ac": "V-JEPA 2-AC"}[kind]
        raise UnsupportedError(f"{what}: {ctx.model!r} is not a {name} world model (predictor kind {got!r})")


def _f32(x: Any, name: str, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise InvalidInputError(f"{name} must be a float array, got {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.ndim != ndim:
        raise InvalidInputError(f"{name} must have {ndim} dimensions, got shape {list(a.shape)}")
    return a


def _planning_error(exc: ValueError) -> InvalidInputError:
    return InvalidInputError(str(exc))


# ---- LeWM ----------------------------------------------------------------------------------------


def lewm_embed(ctx: Context, pixels: np.ndarray) -> np.ndarray:
    """Frames [N, 3, S, S] (preprocessed, see jepa.media) -> embeddings [N, D]: the encoder's CLS
    (after its final norm) through the projector, as LeWM's `JEPA.encode`."""
    _need(ctx, "lewm", "lewm_embed")
    x = _f32(pixels, "pixels", 4)
    return ctx._native.lewm_embed(x)


def lewm_project(ctx: Context, cls: np.ndarray) -> np.ndarray:
    """CLS rows [N, E] of the encoder's tokens -> embeddings [N, D] (the `lewm` pool)."""
    _need(ctx, "lewm", "lewm_project")
    return ctx._native.lewm_project(_f32(cls, "cls", 2))


def project_cls(model: Model, cls: np.ndarray) -> np.ndarray:
    """`lewm_project` on a context of the calling thread kept with `model` (the 'lewm' pool, which
    has a model but no context; a context is never shared by threads)."""
    local = model.__dict__.setdefault("_projector_contexts", threading.local())
    ctx = getattr(local, "ctx", None)
    if ctx is None:
        ctx = local.ctx = model.context(threads=1)
    return lewm_project(ctx, cls)


def lewm_predict_parts(ctx: Context, embs: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
    """`lewm_predict` with its taps: {"pred", "pred_raw" (before the predictor's projector),
    "act_emb" (the action embedder's output)}, each [B, T, D]."""
    _need(ctx, "lewm", "lewm_predict")
    pred, raw, act = ctx._native.lewm_predict(_f32(embs, "embs", 3), _f32(actions, "actions", 3))
    return {"pred": pred, "pred_raw": raw, "act_emb": act}


def lewm_predict(ctx: Context, embs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Embeddings [B, T <= window, D] and actions [B, T, A] -> predictions [B, T, D] (after the
    predictor's projector; row t predicts step t + 1's embedding)."""
    return lewm_predict_parts(ctx, embs, actions)["pred"]


def _window(ctx: Context) -> int:
    return int(ctx.model.info["pred_n_frames"])


def lewm_rollout(ctx: Context, history: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """LeWM's `JEPA.rollout` predicted_emb: history [Hh, D], actions [K, T >= Hh, A] -> [K, T + 1, D]
    (the history first, then the predictions)."""
    _need(ctx, "lewm", "lewm_rollout")
    try:
        hist, acts = _f32(history, "history", 2), _f32(actions, "actions", 3)
        return planning.lewm_rollout(ctx.lewm_predict, hist, acts, window=_window(ctx))
    except ValueError as exc:
        raise _planning_error(exc) from exc


def lewm_cost(ctx: Context, history: np.ndarray, goal: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """LeWM's `JEPA.get_cost`: sum of squares of the last predicted embedding minus the goal [D],
    per candidate of actions [K, T, A] -> [K]."""
    _need(ctx, "lewm", "lewm_cost")
    try:
        return planning.lewm_cost(ctx.lewm_predict, _f32(history, "history", 2), _f32(goal, "goal", 1),
                                  _f32(actions, "actions", 3), window=_window(ctx))
    except ValueError as exc:
        raise _planning_error(exc) from exc


def lewm_plan(
    ctx: Context,
    history: np.ndarray,
    goal: np.ndarray,
    *,
    num_samples: int = 300,
    topk: int = 30,
    n_steps: int = 30,
    horizon: int = 5,
    var_scale: float = 1.0,
    init_action: np.ndarray | None = None,
    seed: int = 0,
    noise: np.ndarray | None = None,
    trace: bool = False,
) -> dict[str, Any]:
    """The CEM solver LeWM's evaluation uses (stable_worldmodel's CEMSolver) with the engine as the
    cost: history [Hh, D], goal [D] -> {"actions" [horizon, A], "cost_per_iteration" [n_steps]}
    (see jepa.planning.lewm_cem; `noise [n_steps, num_samples, horizon, A]` replays draws)."""
    _need(ctx, "lewm", "lewm_plan")
    try:
        return planning.lewm_plan(
            ctx.lewm_predict, _f32(history, "history", 2), _f32(goal, "goal", 1),
            action_dim=int(ctx.model.info["pred_action_dim"]), window=_window(ctx), horizon=horizon,
            num_samples=num_samples, topk=topk, n_steps=n_steps, var_scale=var_scale, init_action=init_action,
            seed=seed, noise=noise, trace=trace,
        )
    except ValueError as exc:
        raise _planning_error(exc) from exc


# ---- V-JEPA 2-AC ---------------------------------------------------------------------------------


def _norm_eps(ctx: Context) -> float:
    return float(ctx.model.info["pred_norm_reps_eps"])


def ac_encode(ctx: Context, frames: np.ndarray) -> np.ndarray:
    """Frames [N, 3, S, S] (preprocessed) -> normalised latents [N, HW, D]: each frame repeated to
    fill one tubelet and encoded on its own, then the non-affine LayerNorm (the AC world model's
    `encode`)."""
    _need(ctx, "ac", "ac_encode")
    x = _f32(frames, "frames", 4)
    clip = np.ascontiguousarray(np.repeat(x[:, :, None], int(ctx.model.info["tubelet_size"]), axis=2))
    return planning.normalize_reps(ctx.encode(clip), _norm_eps(ctx))


def ac_predict(ctx: Context, latents: np.ndarray, actions: np.ndarray, states: np.ndarray) -> np.ndarray:
    """The predictor's raw output [B, T*HW, D] from normalised latents [B, T*HW, D], actions
    [B, T, 7] and states [B, T, 7]; row block t predicts frame t + 1."""
    _need(ctx, "ac", "ac_predict")
    return ctx._native.ac_predict(_f32(latents, "latents", 3), _f32(actions, "actions", 3),
                                  _f32(states, "states", 3))


def ac_rollout(
    ctx: Context,
    context: np.ndarray,
    state: np.ndarray,
    actions: np.ndarray,
    goal: np.ndarray | None = None,
    return_latents: bool = False,
) -> dict[str, np.ndarray]:
    """K candidates from one context frame [HW, D] and robot state [7]: actions [K, H, 7] ->
    {"energies" [K, H], "states" [K, H + 1, 7], "latents" [K, H, HW, D] when asked}; without a goal
    the energy is taken against the context frame (drift). One predictor graph per step."""
    _need(ctx, "ac", "ac_rollout")
    try:
        return planning.ac_rollout(
            ctx.ac_predict, _f32(context, "context", 2), _f32(state, "state", 1), _f32(actions, "actions", 3),
            None if goal is None else _f32(goal, "goal", 2), return_latents=return_latents,
            norm_eps=_norm_eps(ctx),
        )
    except ValueError as exc:
        raise _planning_error(exc) from exc


def ac_plan(
    ctx: Context,
    context: np.ndarray,
    state: np.ndarray,
    goal: np.ndarray,
    *,
    samples: int = 25,
    topk: int = 10,
    cem_steps: int = 2,
    horizon: int = 2,
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
    """Meta's CEM (defaults: the notebook's) with the engine's rollouts as the energy: context and
    goal [HW, D] (normalised latents), state [7] -> {"actions" [horizon, 7], "energy_per_iteration"
    [cem_steps]} (see jepa.planning.ac_cem; `noise [cem_steps, horizon, samples, 4]` replays draws)."""
    _need(ctx, "ac", "ac_plan")
    z, s, g = _f32(context, "context", 2), _f32(state, "state", 1), _f32(goal, "goal", 2)
    eps = _norm_eps(ctx)

    def energy(trajs: np.ndarray) -> np.ndarray:
        return planning.ac_rollout(ctx.ac_predict, z, s, trajs, g, norm_eps=eps)["energies"][:, -1]

    try:
        return planning.ac_cem(
            energy, horizon=horizon, samples=samples, topk=topk, cem_steps=cem_steps,
            momentum_mean=momentum_mean, momentum_std=momentum_std,
            momentum_mean_gripper=momentum_mean_gripper, momentum_std_gripper=momentum_std_gripper,
            maxnorm=maxnorm, gripper_clamp=gripper_clamp, seed=seed, noise=noise, trace=trace,
        )
    except ValueError as exc:
        raise _planning_error(exc) from exc
