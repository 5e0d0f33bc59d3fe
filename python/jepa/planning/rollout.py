"""Rollout drivers with the upstream step logic, parameterised by a `predict` callable, so the
engine's predictor (or the numpy reference) plugs in.

V-JEPA 2-AC (`WorldModel.infer_next_action.step_predictor` driven like `cem()`'s
`sample_action_traj`): the predictor runs on every frame so far; its last frame of output is
normalised (non-affine LayerNorm, eps 1e-5) and appended to the context; the pose advances with
`ac_next_state`. The energy is the mean |pred - goal| over the last predicted frame. A `frames`
callable may give every predicted frame of the rollout in one call instead of the step loop (the
engine's cached rollout, Context.world_rollout, which gives the loop's bits).

LeWM (`JEPA.rollout` / `JEPA.get_cost`): the history embeddings come first and pair with the first
actions; each step predicts from the last `window` embeddings and actions and appends the last
prediction; after the actions run out one more prediction is appended, so a candidate of T actions
gives T + 1 embeddings. The cost is the sum of squares of the last one minus the goal."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import InvalidInputError
from .pose import POSE_DIM, ac_next_state

# predict(latents[B, T*HW, D], actions[B, T, 7], states[B, T, 7]) -> [B, T*HW, D]
ACPredictFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
# frames(context[HW, D], actions[K, H, 7], states[K, H, 7]) -> [K, H, HW, D]: frame h + 1 (step h's
# prediction, normalised) at [:, h], states[:, h] the pose at step h: the step loop in one call
ACFramesFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
# predict(embeddings[B, T, D], actions[B, T, A]) -> [B, T, D]
LeWMPredictFn = Callable[[np.ndarray, np.ndarray], np.ndarray]

NORM_REPS_EPS = 1e-5
LEWM_WINDOW = 3


def normalize_reps(x: np.ndarray, eps: float = NORM_REPS_EPS) -> np.ndarray:
    """F.layer_norm(x, (D,)) without affine: biased variance over the last axis."""
    x64 = np.asarray(x, dtype=np.float64)
    mu = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(axis=-1, keepdims=True)
    return ((x64 - mu) / np.sqrt(var + eps)).astype(np.float32)


def l1_energy(pred: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """Meta's `l1`: mean |pred - goal| over everything but the leading axis."""
    d = np.abs(pred.astype(np.float64) - goal.astype(np.float64))
    return d.reshape(len(d), -1).mean(axis=1).astype(np.float32)


def _check(name: str, x: np.ndarray, shape: tuple[int | None, ...]) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, x.shape, strict=True)):
        want = ", ".join("*" if s is None else str(s) for s in shape)
        raise InvalidInputError(f"{name}: expected [{want}], got {list(x.shape)}", param=name)
    return x


def ac_states(state: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """The pose chain of K candidates: state [7], actions [K, H, 7] -> states [K, H + 1, 7] (index 0 =
    state; `ac_next_state` per step). It does not depend on the predictions."""
    k, h = actions.shape[:2]
    poses = np.broadcast_to(state, (k, 1, POSE_DIM)).copy()
    for step in range(h):
        poses = np.concatenate([poses, ac_next_state(poses[:, -1], actions[:, step])[:, None]], axis=1)
    return poses


def ac_predicted_frames(predict: ACPredictFn, context: np.ndarray, actions: np.ndarray, states: np.ndarray,
                        norm_eps: float = NORM_REPS_EPS) -> np.ndarray:
    """Upstream's step loop (an ACFramesFn over `predict`): at step h the predictor runs on frames
    0 .. h with actions and states [:, :h + 1]; its last frame, normalised, is frame h + 1."""
    hw, d = context.shape
    k, h = actions.shape[:2]
    frames = np.broadcast_to(context, (k, 1, hw, d)).copy()
    for step in range(h):
        t = step + 1
        z = frames.reshape(k, t * hw, d)
        out = np.asarray(predict(z, actions[:, :t], states[:, :t]), dtype=np.float32)
        if out.shape != (k, t * hw, d):
            raise ValueError(f"predict: expected [{k}, {t * hw}, {d}], got {list(out.shape)}")
        frames = np.concatenate([frames, normalize_reps(out[:, -hw:], norm_eps)[:, None]], axis=1)
    return frames[:, 1:]


def ac_rollout(
    predict: ACPredictFn | None,
    context: np.ndarray,
    state: np.ndarray,
    actions: np.ndarray,
    goal: np.ndarray | None = None,
    *,
    return_latents: bool = False,
    norm_eps: float = NORM_REPS_EPS,
    frames: ACFramesFn | None = None,
) -> dict[str, np.ndarray]:
    """Roll K candidate action sequences forward from one context frame.

    context [HW, D] (normalised encoder latents of the current frame), state [7], actions
    [K, H, 7], goal [HW, D] (normalised; default: the context frame, i.e. drift).
    Returns energies [K, H] (step h: L1 of predicted frame h+1 to the goal), states [K, H+1, 7]
    (index 0 = state) and, when asked, latents [K, H, HW, D]. The frames come from upstream's step
    loop over `predict` (`ac_predicted_frames`), or from `frames` in one call when it is given
    (`predict` is then not called and may be None)."""
    ctx = _check("context", context, (None, None))
    hw, d = ctx.shape
    acts = _check("actions", actions, (None, None, POSE_DIM))
    k, h = acts.shape[:2]
    pose0 = _check("state", state, (POSE_DIM,))
    tgt = ctx if goal is None else _check("goal", goal, (hw, d))

    poses = ac_states(pose0, acts)
    if frames is not None:
        nxt = np.asarray(frames(ctx, acts, np.ascontiguousarray(poses[:, :h])), dtype=np.float32)
        if nxt.shape != (k, h, hw, d):
            raise ValueError(f"frames: expected [{k}, {h}, {hw}, {d}], got {list(nxt.shape)}")
    elif predict is not None:
        nxt = ac_predicted_frames(predict, ctx, acts, poses, norm_eps)
    else:
        raise ValueError("ac_rollout needs predict or frames")
    energies = np.empty((k, h), dtype=np.float32)
    for step in range(h):
        f = np.ascontiguousarray(nxt[:, step])
        energies[:, step] = l1_energy(f, np.broadcast_to(tgt, f.shape))
    result = {"energies": energies, "states": poses}
    if return_latents:
        result["latents"] = nxt
    return result


def ac_energy_fn(predict: ACPredictFn, context: np.ndarray, state: np.ndarray,
                 goal: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The CEM energy of V-JEPA 2-AC: trajectories [S, H, 7] -> L1 of the final frame to the goal."""
    return lambda trajs: ac_rollout(predict, context, state, trajs, goal)["energies"][:, -1]


def lewm_rollout(predict: LeWMPredictFn, history: np.ndarray, actions: np.ndarray, *,
                 window: int = LEWM_WINDOW) -> np.ndarray:
    """`JEPA.rollout`'s predicted_emb for K candidates: history [Hh, D], actions [K, T >= Hh, A]
    -> [K, T + 1, D] (history first, then T - Hh + 1 predictions)."""
    hist = _check("history", history, (None, None))
    hh, d = hist.shape
    acts = _check("actions", actions, (None, None, None))
    k, t = acts.shape[:2]
    if hh < 1 or t < hh:
        raise InvalidInputError(f"actions: {t} steps, but the first {hh} pair with the history frames",
                                param="actions")
    embs = np.broadcast_to(hist, (k, hh, d)).copy()
    for n in range(hh, t + 1):  # n = embeddings (and actions) so far
        lo = max(0, n - window)
        out = np.asarray(predict(embs[:, lo:n], acts[:, lo:n]), dtype=np.float32)
        if out.shape != (k, n - lo, d):
            raise ValueError(f"predict: expected [{k}, {n - lo}, {d}], got {list(out.shape)}")
        embs = np.concatenate([embs, out[:, -1:]], axis=1)
    return embs


def lewm_cost(predict: LeWMPredictFn, history: np.ndarray, goal: np.ndarray, actions: np.ndarray, *,
              window: int = LEWM_WINDOW) -> np.ndarray:
    """`JEPA.get_cost`: sum over D of (last predicted embedding - goal)^2 per candidate -> [K]."""
    pred = lewm_rollout(predict, history, actions, window=window)[:, -1]
    g = _check("goal", goal, (pred.shape[-1],))
    diff = pred - g  # float32, as upstream's mse_loss
    return np.asarray(np.sum(diff * diff, axis=-1, dtype=np.float32))


def lewm_cost_fn(predict: LeWMPredictFn, history: np.ndarray, goal: np.ndarray, *,
                 window: int = LEWM_WINDOW) -> Callable[[np.ndarray], np.ndarray]:
    """The CEM cost of LeWM: candidates [S, horizon, A] -> [S]."""
    return lambda cand: lewm_cost(predict, history, goal, cand, window=window)

