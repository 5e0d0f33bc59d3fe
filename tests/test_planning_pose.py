"""Robot pose math of V-JEPA 2-AC against Meta's compute_new_pose / poses_to_diff outputs."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.spatial.transform

from jepa.planning import ac_next_state, ac_pose_diff
from jepa.planning.pose import euler_xyz_to_matrix, matrix_to_euler_xyz

from conftest import AC_BUNDLE

AC = AC_BUNDLE


def _load(name: str) -> np.ndarray:
    return np.load(AC / f"{name}.npy")


def test_next_state_reproduces_rollout_poses_bit_for_bit() -> None:
    actions, poses = _load("rollout_actions"), _load("rollout_poses")  # [K, H, 7], [K, H+1, 7]
    p = poses[:, 0]
    for h in range(actions.shape[1]):
        p = ac_next_state(p, actions[:, h])
        assert p.dtype == np.float32
        np.testing.assert_array_equal(p, poses[:, h + 1])


def test_pose_diff_reproduces_the_context_actions() -> None:
    states, ctx_actions = _load("states")[0], _load("ctx_actions")[0]
    np.testing.assert_array_equal(ac_pose_diff(states[0], states[1]).astype(np.float32), ctx_actions[0])
    np.testing.assert_array_equal(ac_pose_diff(states[1], states[0]).astype(np.float32), ctx_actions[1])


def test_gripper_is_clipped_and_xyz_adds_in_float32() -> None:
    s = np.array([0.1, 0.2, 0.3, 0.0, 0.0, 0.0, 0.9], np.float32)
    a = np.array([0.05, -0.05, 0.0, 0.0, 0.0, 0.0, 0.75], np.float32)
    out = ac_next_state(s, a)
    assert out[6] == 1.0
    np.testing.assert_array_equal(out[:3], s[:3] + a[:3])
    assert ac_next_state(s, -a)[6] == np.float32(0.9) - np.float32(0.75)
    assert ac_next_state(s, np.array([0, 0, 0, 0, 0, 0, -2.0], np.float32))[6] == 0.0


def test_diff_then_apply_returns_to_the_end_pose() -> None:
    rng = np.random.default_rng(1)
    start = np.concatenate([rng.normal(size=3), rng.uniform(-3, 3, 3), [0.5]]).astype(np.float32)
    end = np.concatenate([rng.normal(size=3), rng.uniform(-3, 3, 3), [0.25]]).astype(np.float32)
    end[4] = np.clip(end[4], -1.5, 1.5)
    back = ac_next_state(start, ac_pose_diff(start, end).astype(np.float32))
    np.testing.assert_allclose(back, end, atol=2e-6)


def test_broadcasting_and_shape_errors() -> None:
    s = np.zeros((4, 7), np.float32)
    assert ac_next_state(s, np.zeros(7, np.float32)).shape == (4, 7)
    with pytest.raises(ValueError, match=r"action: expected \[\.\.\., 7\], got \[4, 6\]"):
        ac_next_state(s, np.zeros((4, 6)))


def test_euler_convention_matches_scipy() -> None:
    rotation = scipy.spatial.transform.Rotation
    rng = np.random.default_rng(0)
    angles = rng.uniform(-np.pi, np.pi, (2000, 3))
    angles[:, 1] = rng.uniform(-np.pi / 2, np.pi / 2, 2000)
    m = euler_xyz_to_matrix(angles)
    np.testing.assert_allclose(m, rotation.from_euler("xyz", angles).as_matrix(), atol=1e-15)
    np.testing.assert_allclose(matrix_to_euler_xyz(m), rotation.from_matrix(m).as_euler("xyz"), atol=1e-13)


@pytest.mark.parametrize("b", [np.pi / 2, -np.pi / 2])
def test_gimbal_lock_follows_scipy(b: float) -> None:
    rotation = scipy.spatial.transform.Rotation
    m = euler_xyz_to_matrix(np.array([0.7, b, -1.1]))
    with pytest.warns(UserWarning, match="Gimbal lock"):
        want = rotation.from_matrix(m).as_euler("xyz")
    np.testing.assert_allclose(matrix_to_euler_xyz(m), want, atol=1e-12)
