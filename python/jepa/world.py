"""World models on the engine: V-JEPA 2-AC and LeWM rollouts and CEM plans, one surface for both.

Two levels, each kind-generic (the model's predictor kind picks the rules: its record in
jepa.world_kinds):
- frames in: `rollout`, `plan` (jepa.rollout, jepa.plan; the server's /rollout calls these);
- latents in: `latents` (frames -> the predictor's latents), `rollout_latents`, `plan_latents`, for
  a caller that encodes once and plans many times.
The network runs through the Context's kind-tagged calls (Context.world_latents / world_predict,
jepa_world_* in the C API); the step logic and the planners are jepa.planning's, with the context's
predictor as their `predict` callable. K candidates travel on the batch axis; on the CPU an item's
rows do not depend on its batch, so a batched rollout equals K single ones bit for bit.

V-JEPA 2-AC rollouts and plans take `cache` (default True): the engine runs each rollout whole
(Context.world_rollout), keeping each layer's keys and values per candidate so that a step computes
only its new frame (H frame blocks for a horizon H instead of upstream's H (H + 1) / 2), with the
bits of upstream's loop over world_predict, which cache=False runs (docs/world-models.md). LeWM's
window slides, so it has nothing to cache and ignores it.

Every frames-in and latents-in call takes `stop`, a callable asked before each predictor step (so
between a rollout's steps and between a plan's CEM iterations; a cached rollout, whose steps run in
one engine call, asks before each max_batch candidates): when it returns True the call raises
`Stopped`. The server passes its request's deadline and "the client has gone" this way."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from . import world_kinds
from .errors import InvalidInputError, JepaError
from .planning.rollout import ACFramesFn
from .world_kinds import Steps, WorldKind

if TYPE_CHECKING:
    from .media.budget import Budget
    from .model import Context, Model


def _f32(x: Any, name: str, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "iuf":
        raise InvalidInputError(f"{name} must be numbers, got {a.dtype}", param=name)
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.ndim != ndim:
        raise InvalidInputError(f"{name} must have {ndim} dimensions, got shape {list(a.shape)}", param=name)
    return a


def _kind(ctx: Context, what: str) -> WorldKind:
    return world_kinds.lookup(ctx.model, what)


Stop = Callable[[], bool]


class Stopped(JepaError):
    """A rollout or plan was stopped between predictor steps: its `stop` callable returned True."""


def _check_stop(stop: Stop | None) -> None:
    if stop is not None and stop():
        raise Stopped("stopped between predictor steps (the caller's deadline passed or it went away)")


def predictor(ctx: Context, stop: Stop | None = None) -> Callable[..., np.ndarray]:
    """The context's predictor as jepa.planning's `predict` callable (AC: (latents, actions,
    states); LeWM: (embeddings, actions)), so the planners' step logic runs on the engine. `stop` is
    asked before every step."""
    _kind(ctx, "predictor")

    def predict(latents: np.ndarray, actions: np.ndarray, states: np.ndarray | None = None) -> np.ndarray:
        _check_stop(stop)
        return ctx.world_predict(latents, actions, states)

    return predict


def cached_frames(ctx: Context, stop: Stop | None = None) -> ACFramesFn:
    """The context's cached V-JEPA 2-AC rollout as jepa.planning.ac_rollout's `frames` callable:
    Context.world_rollout per max_batch candidates, `stop` asked before each."""

    def frames(z: np.ndarray, a: np.ndarray, s: np.ndarray) -> np.ndarray:
        n = ctx.max_batch
        parts = []
        for i in range(0, len(a), n):
            _check_stop(stop)
            parts.append(ctx.world_rollout(z, a[i : i + n], s[i : i + n], cache=True))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    return frames


def _steps(ctx: Context, stop: Stop | None, cache: bool) -> Steps:
    """The predictor a kind's rollout or plan drives; with `cache`, the engine's cached rollout too."""
    return Steps(predictor(ctx, stop), cached_frames(ctx, stop) if cache else None)


# ---- frames -> latents ---------------------------------------------------------------------------


def prepare_frames(
    model: Model, frames: Any, what: str = "frames", budget: Budget | None = None
) -> np.ndarray:
    """Frames -> float32 [N, 3, S, S], each preprocessed on its own with the model's recipe.

    `frames` is one frame (a path, bytes, a PIL image, a uint8 [H, W, 3] array) or a sequence of
    them (a list, or a uint8 [N, H, W, 3] array); a float32 [N, 3, S, S] array is taken as already
    prepared (this function's own output). A video file is not a frame: decode it with
    jepa.media.load_video and pass the frames. `budget` (a jepa.media.Budget) bounds the decoding."""
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
        raise InvalidInputError(f"{what}: no frames", param=what)
    out = []
    for i, f in enumerate(seq):
        try:
            # [C, T, H, W]; a tubelet model repeats the frame to fill one tubelet: keep the first.
            out.append(prepare(f, model, as_video=False, budget=budget)[:, 0])
        except InvalidInputError as e:
            raise InvalidInputError(f"{what}[{i}]: {e.message}", param=what) from None
    return np.ascontiguousarray(np.stack(out))


# ---- a world request's own inputs, checked before any frame is encoded --------------------------
# The engine checks the same widths again at every predictor call (and names the argument); these
# are the early refusal, so a wrong request costs no encode. jepa.rollout / jepa.plan and the
# server's /rollout parser call them; nothing else repeats them.


def check_actions(model: Model, actions: Any) -> np.ndarray:
    """Candidates [K, H, A] or one sequence [H, A] -> float32 [K, H, A], A the model's action width."""
    dim = model.info.pred_action_dim
    a = np.asarray(actions)
    if a.dtype.kind not in "iuf" or a.ndim not in (2, 3) or a.size == 0 or a.shape[-1] != dim:
        raise InvalidInputError(
            f"actions must be [K, H, {dim}] or [H, {dim}] numbers for this model, got "
            f"{a.dtype} {list(a.shape)}",
            param="actions",
        )
    a = np.ascontiguousarray(a, dtype=np.float32)
    return a[None] if a.ndim == 2 else a


def check_state(model: Model, state: Any) -> np.ndarray | None:
    """The robot state of the current (last) frame: V-JEPA 2-AC requires [dim] (or [T, dim], whose
    last row is taken) -> float32 [dim]; LeWM takes none (its actions carry everything) -> None."""
    kind = world_kinds.lookup(model, "state")
    if not kind.takes_state:
        if state is not None:
            raise InvalidInputError(
                f"state: a {kind.title} model takes no robot state (its actions carry everything)",
                param="state",
            )
        return None
    dim = model.info.pred_state_dim
    if state is None:
        raise InvalidInputError(
            f"state is required for a {kind.title} model: the robot's pose [{dim}]", param="state"
        )
    s = np.asarray(state)
    if s.dtype.kind not in "iuf" or s.ndim not in (1, 2) or s.shape[-1] != dim or s.size == 0:
        raise InvalidInputError(
            f"state must be [{dim}] or [T, {dim}] numbers, got {s.dtype} {list(s.shape)}", param="state"
        )
    return np.ascontiguousarray(s.reshape(-1, dim)[-1], dtype=np.float32)


def latents(ctx: Context, frames: Any, what: str = "frames") -> np.ndarray:
    """Frames (as `prepare_frames` takes them) -> the world model's latents, one per frame:
    V-JEPA 2-AC [N, HW, D] (each frame repeated to fill one tubelet, encoded on its own, then the
    non-affine LayerNorm: the AC world model's `encode`), LeWM [N, D] (the CLS through the
    projector: LeWM's `JEPA.encode`)."""
    kind = _kind(ctx, "latents")
    return kind.latents(ctx, prepare_frames(ctx.model, frames, what))


def _last(ctx: Context, frames: Any, what: str) -> np.ndarray:
    """The latent of the last frame only (only that frame is encoded)."""
    x = prepare_frames(ctx.model, frames, what)
    return latents(ctx, x[-1:], what)[0]


# ---- latents in ----------------------------------------------------------------------------------


def rollout_latents(
    ctx: Context,
    context: np.ndarray,
    actions: Any,
    goal: np.ndarray | None = None,
    state: Any = None,
    return_latents: bool = False,
    stop: Stop | None = None,
    cache: bool = True,
) -> dict[str, Any]:
    """Score K candidate action sequences (actions [K, H, A] or [H, A]) from latents.

    - V-JEPA 2-AC: context [HW, D] is the current frame's latent, `state` its robot pose ([7], or
      [T, 7] whose last row is taken; required), goal [HW, D] (default: the context frame, drift).
      -> {"energies" [K, H] (mean |pred - goal| per step), "best" (argmin of the last step's),
      "states" [K, H + 1, 7], "latents" [K, H, HW, D] when asked}. cache=True: one engine call
      whose steps compute only their new frame; False: one predictor graph of every frame so far per
      step (upstream's loop); the same bits on the CPU.
    - LeWM: context [Hh, D] is the history's embeddings (H >= Hh), goal [D] (default: the last
      history embedding); `state` is refused. -> {"costs" [K] (`JEPA.get_cost`), "best",
      "latents" [K, H + 1, D] (`JEPA.rollout`'s predicted_emb) when asked}.
    Ties in "best" go to the smaller index."""
    kind = _kind(ctx, "rollout")
    acts = check_actions(ctx.model, actions)
    s = check_state(ctx.model, state)
    z = _f32(context, "context", 2)
    g = None if goal is None else _f32(goal, "goal", kind.goal_ndim)
    return kind.rollout(ctx, _steps(ctx, stop, cache), z, acts, g, s, return_latents)


def plan_latents(
    ctx: Context,
    context: np.ndarray,
    goal: np.ndarray,
    state: Any = None,
    *,
    stop: Stop | None = None,
    cache: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """The model's CEM plan from latents towards a goal latent.

    - V-JEPA 2-AC: Meta's CEM (jepa.planning.ac_cem) with the engine's rollouts as the energy:
      context and goal [HW, D], state [7] (required) -> {"actions" [horizon, 7],
      "energy_per_iteration" [cem_steps]}; `cache` as rollout_latents' (the same plan either way).
    - LeWM: stable_worldmodel's CEMSolver (jepa.planning.lewm_cem) with `JEPA.get_cost` as the
      cost: history [Hh, D], goal [D] -> {"actions" [horizon, A], "cost_per_iteration" [n_steps]}.
    `options` and their defaults are the planner's (ac_cem / lewm_cem), the one place they are
    declared and checked; `noise` replays recorded draws."""
    kind = _kind(ctx, "plan")
    s = check_state(ctx.model, state)
    z, g = _f32(context, "context", 2), _f32(goal, "goal", kind.goal_ndim)
    objective = kind.objective(ctx, _steps(ctx, stop, cache), z, g, s)
    return kind.planner(objective, **kind.planner_args(ctx.model.info), **options)


# ---- frames in -----------------------------------------------------------------------------------


def rollout(
    context: Context,
    frames: Any,
    actions: Any,
    goal: Any = None,
    state: Any = None,
    return_latents: bool = False,
    stop: Stop | None = None,
    cache: bool = True,
) -> dict[str, Any]:
    """Score K candidate action sequences from frames, under the context's world model:
    `rollout_latents` on the latents of the frames (V-JEPA 2-AC: the last frame is the current
    observation; LeWM: every frame is history) and of the goal's last frame."""
    kind = _kind(context, "rollout")
    check_actions(context.model, actions)  # refused before any frame is encoded
    check_state(context.model, state)
    z = latents(context, frames, "frames") if kind.history else _last(context, frames, "frames")
    g = None if goal is None else _last(context, goal, "goal")
    return rollout_latents(context, z, actions, g, state, return_latents, stop, cache)


def plan(
    context: Context,
    frames: Any,
    goal: Any,
    state: Any = None,
    *,
    stop: Stop | None = None,
    cache: bool = True,
    **planner_options: Any,
) -> dict[str, Any]:
    """Plan an action sequence from frames towards a goal frame with the model's CEM planner:
    `plan_latents` on the latents of the frames (as `rollout`) and of the goal's last frame."""
    kind = _kind(context, "plan")
    if goal is None:
        raise InvalidInputError("goal: a plan needs a goal frame to plan towards", param="goal")
    check_state(context.model, state)
    z = latents(context, frames, "frames") if kind.history else _last(context, frames, "frames")
    return plan_latents(context, z, _last(context, goal, "goal"), state, stop=stop, cache=cache,
                        **planner_options)
