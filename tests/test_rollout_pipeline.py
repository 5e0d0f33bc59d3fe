"""jepa.rollout / jepa.plan, the one pipeline of the world models: frames in (the encoder runs
first), the context's rollouts and planners out. From the reference bundles' uint8 frames they give
the bits the Context methods give on the bundle pipeline's latents, and reproduce the goldens."""

from __future__ import annotations

import numpy as np
import pytest

import jepa
from jepa import world

from conftest import AC_BUNDLE, LEWM_BUNDLE, bits
from numpy_reference import assert_agrees, assert_rel_close, cem_options

LEWM, AC = LEWM_BUNDLE, AC_BUNDLE
pytestmark = [pytest.mark.torch, pytest.mark.every_path]
TOL = 1e-5


def lg(name: str) -> np.ndarray:
    return np.load(LEWM / f"{name}.npy")


def ag(name: str) -> np.ndarray:
    return np.load(AC / f"{name}.npy")



@pytest.fixture(scope="module")
def lewm(tiny_lewm_path: str) -> jepa.Context:
    return jepa.Model(tiny_lewm_path).context(threads=2)


@pytest.fixture(scope="module")
def ac(tiny_ac_path: str) -> jepa.Context:
    return jepa.Model(tiny_ac_path).context(threads=2)


# ---- LeWM -----------------------------------------------------------------------------------------


def test_lewm_frames_are_the_bundle_pixels(lewm: jepa.Context) -> None:
    from jepa.world import prepare_frames

    want = bits(lg("pixels")[0])
    np.testing.assert_array_equal(bits(prepare_frames(lewm.model, lg("frames_u8"))), want)
    np.testing.assert_array_equal(bits(prepare_frames(lewm.model, list(lg("frames_u8")))), want)


def test_lewm_rollout_from_frames(lewm: jepa.Context) -> None:
    u8, cand = lg("frames_u8"), lg("cand_eval")[0]
    emb = world.latents(lewm, lg("pixels")[0])  # the bundle pipeline's embeddings
    out = jepa.rollout(lewm, u8[:1], cand, goal=u8[3], return_latents=True)
    assert set(out) == {"costs", "best", "latents"}
    np.testing.assert_array_equal(
        bits(out["costs"]), bits(world.rollout_latents(lewm, emb[:1], cand, emb[3])["costs"])
    )
    np.testing.assert_array_equal(
        bits(out["latents"]), bits(world.rollout_latents(lewm, emb[:1], cand, return_latents=True)["latents"])
    )
    assert_rel_close(out["costs"], lg("cost_eval")[0], "cost_eval", rtol=TOL)
    assert_agrees(out["latents"], lg("rollout_h1")[0], "rollout_h1")
    assert out["best"] == int(np.argmin(lg("cost_eval")[0]))
    # Three history frames; one sequence [H, A] is one candidate.
    h3 = jepa.rollout(lewm, list(u8[:3]), lg("cand_hist")[0, 0], goal=u8[3], return_latents=True)
    assert_agrees(h3["latents"], lg("rollout_h3")[0, :1], "rollout_h3")
    assert h3["costs"].shape == (1,) and h3["best"] == 0
    # Without a goal: the distance to the last history embedding (drift).
    drift = jepa.rollout(lewm, u8[:1], cand)
    np.testing.assert_array_equal(
        bits(drift["costs"]), bits(world.rollout_latents(lewm, emb[:1], cand, emb[0])["costs"])
    )


def test_lewm_plan_reproduces_upstream_cem(lewm: jepa.Context) -> None:
    opts = {**cem_options(LEWM, "lewm"), "noise": lg("cem_noise")[:, 0]}
    u8 = lg("frames_u8")
    out = jepa.plan(lewm, u8[0], u8[3], **opts)
    np.testing.assert_allclose(out["actions"], lg("cem_actions")[0], rtol=0, atol=TOL)
    emb = world.latents(lewm, lg("pixels")[0])
    ref = world.plan_latents(lewm, emb[:1], emb[3], **opts)
    np.testing.assert_array_equal(bits(out["actions"]), bits(ref["actions"]))
    np.testing.assert_array_equal(bits(out["cost_per_iteration"]), bits(ref["cost_per_iteration"]))


def test_lewm_refusals(lewm: jepa.Context) -> None:
    u8, cand = lg("frames_u8"), lg("cand_eval")[0]
    with pytest.raises(jepa.InvalidInputError, match="state"):
        jepa.rollout(lewm, u8[:1], cand, state=np.zeros(7, np.float32))
    with pytest.raises(jepa.InvalidInputError, match="actions"):
        jepa.rollout(lewm, u8[:1], cand[..., :-1])
    with pytest.raises(jepa.InvalidInputError, match="goal"):
        jepa.plan(lewm, u8[:1], None)
    with pytest.raises(jepa.InvalidInputError, match=r"frames\[0\]"):
        jepa.rollout(lewm, [b"not an image"], cand)


# ---- V-JEPA 2-AC ----------------------------------------------------------------------------------


def _ac_latents(ac: jepa.Context) -> np.ndarray:
    return world.latents(ac, ag("input_clip")[0].transpose(1, 0, 2, 3))  # the bundle pipeline's [2, HW, D]


def test_ac_rollout_from_frames(ac: jepa.Context) -> None:
    u8, s, acts = ag("frames_u8"), ag("states")[0], ag("rollout_actions")
    out = jepa.rollout(ac, u8[:1], acts, goal=u8[1], state=s[:1], return_latents=True)
    assert set(out) == {"energies", "best", "states", "latents"}
    z = _ac_latents(ac)
    ref = world.rollout_latents(ac, z[0], acts, z[1], state=s[0], return_latents=True)
    for key in ("energies", "states", "latents"):
        np.testing.assert_array_equal(bits(out[key]), bits(ref[key]), err_msg=key)
    assert_rel_close(out["energies"], ag("rollout_energy"), "rollout_energy", rtol=TOL)
    assert_agrees(out["latents"], ag("rollout_latents"), "rollout_latents")
    np.testing.assert_array_equal(out["states"], ag("rollout_poses"))
    assert out["best"] == int(np.argmin(ag("rollout_energy")[:, -1]))
    # Only the last context frame counts; a state [7] is the same as [T, 7]'s last row.
    last = jepa.rollout(ac, [u8[1], u8[0]], acts[0], goal=u8[1], state=s[0])
    np.testing.assert_array_equal(bits(last["energies"]), bits(ref["energies"][:1]))
    drift = jepa.rollout(ac, u8[0], acts, state=s[0])
    np.testing.assert_array_equal(
        bits(drift["energies"]), bits(world.rollout_latents(ac, z[0], acts, state=s[0])["energies"])
    )


def test_ac_plan_reproduces_upstream_cem(ac: jepa.Context) -> None:
    opts = {**cem_options(AC, "ac"), "noise": ag("cem_noise")}
    u8, s = ag("frames_u8"), ag("states")[0, 0]
    out = jepa.plan(ac, u8[0], u8[1], state=s, **opts)
    np.testing.assert_allclose(out["actions"], ag("cem_action"), rtol=0, atol=TOL)
    z = _ac_latents(ac)
    ref = world.plan_latents(ac, z[0], z[1], state=s, **opts)
    np.testing.assert_array_equal(bits(out["actions"]), bits(ref["actions"]))
    np.testing.assert_array_equal(bits(out["energy_per_iteration"]), bits(ref["energy_per_iteration"]))


def test_ac_refusals(ac: jepa.Context) -> None:
    u8, acts = ag("frames_u8"), ag("rollout_actions")
    with pytest.raises(jepa.InvalidInputError, match="state is required"):
        jepa.rollout(ac, u8[0], acts)
    with pytest.raises(jepa.InvalidInputError, match="state"):
        jepa.rollout(ac, u8[0], acts, state=np.zeros(6, np.float32))
    with pytest.raises(jepa.InvalidInputError, match="actions"):
        jepa.rollout(ac, u8[0], acts[..., :6], state=ag("states")[0, 0])


def test_not_a_world_model() -> None:
    import jepa.demo

    ctx = jepa.Model(jepa.demo.demo_model_path()).context(threads=1)
    with pytest.raises(jepa.UnsupportedError, match="not a world model"):
        jepa.rollout(ctx, np.zeros((8, 8, 3), np.uint8), np.zeros((1, 2), np.float32))
    with pytest.raises(jepa.UnsupportedError, match="not a world model"):
        jepa.plan(ctx, np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8, 3), np.uint8))
