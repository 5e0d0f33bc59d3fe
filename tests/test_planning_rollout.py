"""The rollout drivers' step logic on toy predictors (the real predictors are checked against the
upstream goldens in test_reference_* and test_planning_end_to_end)."""

from __future__ import annotations

import numpy as np
import pytest

from jepa.planning import ac_next_state, ac_rollout, lewm_cost, lewm_rollout, normalize_reps


class LeWMToy:
    """predict = embeddings + 0.1 * sum of actions, recording what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[np.ndarray, np.ndarray]] = []

    def __call__(self, embs: np.ndarray, acts: np.ndarray) -> np.ndarray:
        self.calls.append((embs.copy(), acts.copy()))
        return (embs + 0.1 * acts.sum(axis=-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize(("hist", "steps", "windows"), [(1, 5, [1, 2, 3, 3, 3]), (3, 6, [3, 3, 3, 3])])
def test_lewm_rollout_history_first_window_of_three(hist: int, steps: int, windows: list[int]) -> None:
    rng = np.random.default_rng(0)
    history = rng.standard_normal((hist, 4)).astype(np.float32)
    actions = rng.standard_normal((2, steps, 3)).astype(np.float32)
    toy = LeWMToy()
    out = lewm_rollout(toy, history, actions)
    assert out.shape == (2, steps + 1, 4)
    np.testing.assert_array_equal(out[:, :hist], np.broadcast_to(history, (2, hist, 4)))
    calls = list(toy.calls)
    assert [c[0].shape[1] for c in calls] == windows
    for n, (embs, acts) in zip(range(hist, steps + 1), calls, strict=True):
        lo = max(0, n - 3)
        np.testing.assert_array_equal(embs, out[:, lo:n])  # the last 3 embeddings so far
        np.testing.assert_array_equal(acts, actions[:, lo:n])  # paired with their actions
        np.testing.assert_array_equal(out[:, n], toy(embs, acts)[:, -1])  # only the last output is kept


def test_lewm_cost_is_the_squared_distance_of_the_last_prediction() -> None:
    rng = np.random.default_rng(1)
    history, goal = rng.standard_normal((1, 4)), rng.standard_normal(4)
    actions = rng.standard_normal((3, 5, 2)).astype(np.float32)
    last = lewm_rollout(LeWMToy(), history, actions)[:, -1]
    np.testing.assert_allclose(lewm_cost(LeWMToy(), history, goal, actions),
                               ((last - goal.astype(np.float32)) ** 2).sum(axis=1), rtol=1e-6)
    with pytest.raises(ValueError, match="first 2 pair with the history"):
        lewm_rollout(LeWMToy(), np.zeros((2, 4)), np.zeros((1, 1, 2)))


def test_ac_rollout_steps_normalise_and_track_the_pose() -> None:
    hw, d, k, h = 3, 8, 2, 3
    rng = np.random.default_rng(2)
    context, goal = rng.standard_normal((hw, d)), rng.standard_normal((hw, d))
    state = np.array([0.5, 0, 0.2, 0.1, -0.2, 0.3, 0.4], np.float32)
    actions = rng.uniform(-0.05, 0.05, (k, h, 7)).astype(np.float32)
    seen: list[int] = []

    def predict(latents: np.ndarray, acts: np.ndarray, states: np.ndarray) -> np.ndarray:
        t = acts.shape[1]
        seen.append(t)
        assert latents.shape == (k, t * hw, d) and states.shape == (k, t, 7)
        shift = np.repeat(acts[:, :, :1] + states[:, :, 6:], hw, axis=1)  # one value per frame
        return (2.0 * latents + shift).astype(np.float32)

    out = ac_rollout(predict, context, state, actions, goal, return_latents=True)
    assert seen == [1, 2, 3]
    assert out["energies"].shape == (k, h) and out["latents"].shape == (k, h, hw, d)
    poses = [np.broadcast_to(state, (k, 7))]
    for step in range(h):
        poses.append(ac_next_state(poses[-1], actions[:, step]))
    np.testing.assert_array_equal(out["states"], np.stack(poses, axis=1))
    prev = normalize_reps(context)
    for step in range(h):
        shift = (actions[:, step, 0] + poses[step][:, 6])[:, None, None]
        want = normalize_reps(2.0 * prev + shift) if step else normalize_reps(2.0 * context + shift)
        np.testing.assert_allclose(out["latents"][:, step], want, atol=1e-5)
        np.testing.assert_allclose(out["energies"][:, step], np.abs(want - goal).mean(axis=(1, 2)), rtol=1e-5)
        prev = out["latents"][:, step]
    drift = ac_rollout(predict, context, state, actions)["energies"]
    from_context = np.abs(out["latents"][:, 0] - context).mean(axis=(1, 2))
    np.testing.assert_allclose(drift[:, 0], from_context, rtol=1e-5)  # no goal: energy is the drift
