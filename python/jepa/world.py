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


def lewm_plan(ctx: Context, history: np.ndarray, goal: np.ndarray, **options: Any) -> dict[str, Any]:
    """The CEM solver LeWM's evaluation uses (stable_worldmodel's CEMSolver) with the engine as the
    cost: history [Hh, D], goal [D] -> {"actions" [horizon, A], "cost_per_iteration" [n_steps]}.
    options (num_samples, topk, n_steps, horizon, var_scale, init_action, seed, noise, trace) and
    their defaults are jepa.planning.lewm_cem's, the one place they are declared;
    `noise [n_steps, num_samples, horizon, A]` replays draws."""
    _need(ctx, "lewm", "lewm_plan")
    try:
        return planning.lewm_plan(
            ctx.lewm_predict, _f32(history, "history", 2), _f32(goal, "goal", 1),
            action_dim=int(ctx.model.info["pred_action_dim"]), window=_window(ctx), **options,
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
    ctx: Context, context: np.ndarray, state: np.ndarray, goal: np.ndarray, **options: Any
) -> dict[str, Any]:
    """Meta's CEM with the engine's rollouts as the energy: context and goal [HW, D] (normalised
    latents), state [7] -> {"actions" [horizon, 7], "energy_per_iteration" [cem_steps]}. options
    (samples, topk, cem_steps, horizon, momentum_*, maxnorm, gripper_clamp, seed, noise, trace) and
    their defaults (Meta's notebook's) are jepa.planning.ac_cem's, the one place they are declared;
    `noise [cem_steps, horizon, samples, 4]` replays draws."""
    _need(ctx, "ac", "ac_plan")
    z, s, g = _f32(context, "context", 2), _f32(state, "state", 1), _f32(goal, "goal", 2)
    eps = _norm_eps(ctx)

    def energy(trajs: np.ndarray) -> np.ndarray:
        return planning.ac_rollout(ctx.ac_predict, z, s, trajs, g, norm_eps=eps)["energies"][:, -1]

    try:
        return planning.ac_cem(energy, **options)
    except ValueError as exc:
        raise _planning_error(exc) from exc


# ---- the one pipeline: frames in (jepa.rollout, jepa.plan) --------------------------------------
# The server's /rollout calls these same functions on the frames it prepared off the event loop.


def prepare_frames(model: Model, frames: Any, what: str = "frames") -> np.ndarray:
    """Frames -> float32 [N, 3, S, S], each preprocessed on its own with the model's recipe.

    `frames` is one frame (a path, bytes, a PIL image, a uint8 [H, W, 3] array) or a sequence of
    them (a list, or a uint8 [N, H, W, 3] array); a float32 [N, 3, S, S] array is taken as already
    prepared (this function's own output). A video file is not a frame: decode it with
    jepa.media.load_video and pass the frames."""
    from .media import prepare  # Pillow loads on first use: `import jepa` stays light

    if isinstance(frames, np.ndarray) and frames.dtype.kind == "f":
        return _f32(frames, what, 4)
    if isinstance(frames, np.ndarray) and frames.ndim == 4:
        seq: list[Any] = list(frames)
    elif isinstance(frames, list | tuple):
        seq = list(frames)
    else:
        seq = [frames]
    if not seq:
        raise InvalidInputError(f"{what}: no frames")
    out = []
    for i, f in enumerate(seq):
        try:
            # [C, T, H, W]; a tubelet model repeats the frame to fill one tubelet: keep the first.
            out.append(prepare(f, model, as_video=False)[:, 0])
        except InvalidInputError as e:
            raise InvalidInputError(f"{what}[{i}]: {e.message}") from None
    return np.ascontiguousarray(np.stack(out))


def _candidates(actions: Any, dim: int) -> np.ndarray:
    """Actions [K, H, dim] or one sequence [H, dim] -> float32 [K, H, dim]."""
    a = np.asarray(actions)
    if a.dtype.kind not in "iuf" or a.ndim not in (2, 3) or a.size == 0 or a.shape[-1] != dim:
        raise InvalidInputError(
            f"actions must be [K, H, {dim}] or [H, {dim}] numbers for this model, got "
            f"{a.dtype} {list(a.shape)}"
        )
    a = np.ascontiguousarray(a, dtype=np.float32)
    return a[None] if a.ndim == 2 else a


def _ac_state(ctx: Context, state: Any) -> np.ndarray:
    """The robot state of the current (last) frame: [dim], or [T, dim] whose last row is taken."""
    dim = int(ctx.model.info["pred_state_dim"])
    if state is None:
        raise InvalidInputError(f"state is required for a V-JEPA 2-AC model: the robot's pose [{dim}]")
    s = np.asarray(state)
    if s.dtype.kind not in "iuf" or s.ndim not in (1, 2) or s.shape[-1] != dim or s.size == 0:
        raise InvalidInputError(f"state must be [{dim}] or [T, {dim}] numbers, got {s.dtype} {list(s.shape)}")
    return np.ascontiguousarray(s.reshape(-1, dim)[-1], dtype=np.float32)


def _no_state(state: Any) -> None:
    if state is not None:
        raise InvalidInputError("state: a LeWM model takes no robot state (its actions carry everything)")


def _world_kind(ctx: Context, what: str) -> str:
    kind = ctx.model.world_model
    if not kind:
        raise UnsupportedError(
            f"{what}: {ctx.model!r} is not a world model (no LeWM or V-JEPA 2-AC predictor)"
        )
    return kind


def _ac_latent(ctx: Context, frames: Any, what: str) -> np.ndarray:
    """The normalised latent [HW, D] of the last frame (only that frame is encoded)."""
    x = prepare_frames(ctx.model, frames, what)
    return ac_encode(ctx, x[-1:])[0]


def _lewm_embs(ctx: Context, frames: Any, what: str, last: bool = False) -> np.ndarray:
    """The LeWM embeddings [N, D] of the frames (of the last one only when `last`)."""
    x = prepare_frames(ctx.model, frames, what)
    return lewm_embed(ctx, x[-1:] if last else x)


def rollout(
    context: Context,
    frames: Any,
    actions: Any,
    goal: Any = None,
    state: Any = None,
    return_latents: bool = False,
) -> dict[str, Any]:
    """Score K candidate action sequences from frames, under the context's world model.

    frames and goal are frames as `prepare_frames` takes them; actions [K, H, A] or [H, A].
    - V-JEPA 2-AC: the last frame of `frames` is the current observation and `state` its robot pose
      ([7], or [T, 7] whose last row is taken; required). -> {"energies" [K, H] (mean |pred - goal|
      per step; against the context frame without a goal), "best" (argmin of the last step's
      energy), "states" [K, H + 1, 7], "latents" [K, H, HW, D] when asked}: `ctx.ac_rollout`.
    - LeWM: every frame of `frames` is history (their embeddings), `state` is refused; H must be at
      least the number of history frames. -> {"costs" [K] (`JEPA.get_cost`: squared distance of the
      last predicted embedding to the goal's; to the last history embedding without a goal),
      "best" (argmin), "latents" [K, H + 1, D] (`JEPA.rollout`'s predicted_emb) when asked}:
      `ctx.lewm_cost` / `ctx.lewm_rollout`.
    Ties in "best" go to the smaller index."""
    kind = _world_kind(context, "rollout")
    dim = int(context.model.info["pred_action_dim"])
    acts = _candidates(actions, dim)
    if kind == "ac":
        s = _ac_state(context, state)
        z = _ac_latent(context, frames, "frames")
        g = None if goal is None else _ac_latent(context, goal, "goal")
        out: dict[str, Any] = dict(ac_rollout(context, z, s, acts, g, return_latents=return_latents))
        out["best"] = int(np.argmin(out["energies"][:, -1]))
        return out
    _no_state(state)
    hist = _lewm_embs(context, frames, "frames")
    tgt = hist[-1] if goal is None else _lewm_embs(context, goal, "goal", last=True)[0]
    costs = lewm_cost(context, hist, tgt, acts)
    res: dict[str, Any] = {"costs": costs, "best": int(np.argmin(costs))}
    if return_latents:
        res["latents"] = lewm_rollout(context, hist, acts)
    return res


def plan(
    context: Context, frames: Any, goal: Any, state: Any = None, **planner_options: Any
) -> dict[str, Any]:
    """Plan an action sequence from frames towards a goal frame with the model's CEM planner.

    - V-JEPA 2-AC: `ctx.ac_plan` from the last frame's latent and `state` (required) to the goal's
      -> {"actions" [horizon, 7], "energy_per_iteration" [cem_steps]}; options as ac_plan's.
    - LeWM: `ctx.lewm_plan` from the history embeddings of `frames` to the goal's -> {"actions"
      [horizon, A], "cost_per_iteration" [n_steps]}; options as lewm_plan's; `state` is refused."""
    kind = _world_kind(context, "plan")
    if goal is None:
        raise InvalidInputError("goal: a plan needs a goal frame to plan towards")
    if kind == "ac":
        s = _ac_state(context, state)
        z, g = _ac_latent(context, frames, "frames"), _ac_latent(context, goal, "goal")
        return ac_plan(context, z, s, g, **planner_options)
    _no_state(state)
    hist = _lewm_embs(context, frames, "frames")
    g = _lewm_embs(context, goal, "goal", last=True)[0]
    return lewm_plan(context, hist, g, **planner_options)
