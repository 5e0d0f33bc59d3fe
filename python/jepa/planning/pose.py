"""Robot pose arithmetic of V-JEPA 2-AC (Meta's `notebooks/utils/mpc_utils.py`), in numpy.

A pose or an action is 7 numbers: x, y, z, three extrinsic 'xyz' Euler angles in radians (roll
about the fixed x axis first, then y, then z: R = Rz(c) Ry(b) Rx(a)), and the gripper. An action is
a pose delta: xyz adds, the rotation composes on the left (R_new = R(delta) R(pose)), the gripper
adds and is clipped to [0, 1]. Rotations are done in float64 like scipy's, and the result cast to
float32; xyz and the gripper are added in the inputs' float32, as upstream does."""

from __future__ import annotations

import numpy as np

from ..errors import InvalidInputError

POSE_DIM = 7


def euler_xyz_to_matrix(angles: np.ndarray) -> np.ndarray:
    """Extrinsic 'xyz' Euler angles [..., 3] -> rotation matrices [..., 3, 3] (float64)."""
    a = np.asarray(angles, dtype=np.float64)
    ca, cb, cc = np.cos(a[..., 0]), np.cos(a[..., 1]), np.cos(a[..., 2])
    sa, sb, sc = np.sin(a[..., 0]), np.sin(a[..., 1]), np.sin(a[..., 2])
    r = np.empty((*a.shape[:-1], 3, 3), dtype=np.float64)
    # Rz(c) @ Ry(b) @ Rx(a)
    r[..., 0, 0] = cc * cb
    r[..., 0, 1] = cc * sb * sa - sc * ca
    r[..., 0, 2] = cc * sb * ca + sc * sa
    r[..., 1, 0] = sc * cb
    r[..., 1, 1] = sc * sb * sa + cc * ca
    r[..., 1, 2] = sc * sb * ca - cc * sa
    r[..., 2, 0] = -sb
    r[..., 2, 1] = cb * sa
    r[..., 2, 2] = cb * ca
    return r


def matrix_to_euler_xyz(r: np.ndarray) -> np.ndarray:
    """Rotation matrices [..., 3, 3] -> extrinsic 'xyz' Euler angles [..., 3] (float64).

    The middle angle lies in [-pi/2, pi/2], the others in (-pi, pi]. At gimbal lock (middle angle
    ±pi/2) the last angle is set to 0, scipy's convention."""
    r = np.asarray(r, dtype=np.float64)
    cb = np.hypot(r[..., 0, 0], r[..., 1, 0])
    b = np.arctan2(-r[..., 2, 0], cb)
    a = np.arctan2(r[..., 2, 1], r[..., 2, 2])
    c = np.arctan2(r[..., 1, 0], r[..., 0, 0])
    lock = cb < 1e-7
    if np.any(lock):
        # Only a - c (b = +pi/2) or a + c (b = -pi/2) is defined; put it all in a.
        sign = np.where(r[..., 2, 0] < 0, 1.0, -1.0)
        a_lock = np.arctan2(sign * r[..., 0, 1], r[..., 1, 1])
        a = np.where(lock, a_lock, a)
        c = np.where(lock, 0.0, c)
    return np.stack([a, b, c], axis=-1)


def _split(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.shape[-1:] != (POSE_DIM,):
        raise InvalidInputError(f"{name}: expected [..., {POSE_DIM}], got {list(x.shape)}", param=name)
    return x.astype(np.float32, copy=False)


def ac_next_state(state: np.ndarray, action: np.ndarray) -> np.ndarray:
    """Meta's `compute_new_pose`: the pose after applying `action` to `state` ([..., 7] each,
    broadcast against each other) -> float32 [..., 7]."""
    s, d = _split(state, "state"), _split(action, "action")
    s, d = np.broadcast_arrays(s, d)
    xyz = s[..., :3] + d[..., :3]
    rot = euler_xyz_to_matrix(d[..., 3:6]) @ euler_xyz_to_matrix(s[..., 3:6])
    angles = matrix_to_euler_xyz(rot).astype(np.float32)
    grip = np.clip(s[..., 6:] + d[..., 6:], np.float32(0.0), np.float32(1.0))
    return np.concatenate([xyz, angles, grip], axis=-1)


def ac_pose_diff(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Meta's `poses_to_diff`: the action that takes pose `start` to pose `end` ([..., 7] each).

    Returned in float64 like upstream (xyz and gripper differences in the inputs' dtype)."""
    s, e = _split(start, "start"), _split(end, "end")
    s, e = np.broadcast_arrays(s, e)
    xyz = e[..., :3] - s[..., :3]
    rs, re = euler_xyz_to_matrix(s[..., 3:6]), euler_xyz_to_matrix(e[..., 3:6])
    angles = matrix_to_euler_xyz(re @ np.swapaxes(rs, -1, -2))
    grip = e[..., 6:] - s[..., 6:]
    return np.concatenate([xyz.astype(np.float64), angles, grip.astype(np.float64)], axis=-1)
