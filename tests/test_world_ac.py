"""V-JEPA 2-AC on the engine against Meta's goldens (../shared/reference/vjepa2_ac): the encode step,
the action-conditioned predictor, rollouts and energies, and Meta's CEM with the engine as the
energy and upstream's draws replayed; batched candidates equal single rollouts bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import jepa
from jepa import world
from jepa.convert import convert

from conftest import AC_BUNDLE, bits, model_and_context
from numpy_reference import assert_agrees, assert_cem_replays, assert_rel_close, cem_golden, cem_options

AC = AC_BUNDLE
# @pytest.mark.parity: within a tolerance of the goldens in the exact class, run on the default path alone;
# the rest (bit identity, and tests that check bits and a tolerance) on every kernel path.
pytestmark = [pytest.mark.torch, pytest.mark.every_path]
TOL = 1e-5
# Sizes and planner settings from the bundle itself, so an independent bundle runs unchanged.
HP = json.loads((AC / "hparams.json").read_text())
HW = int(HP["tokens_per_frame"])
MPC = HP["mpc_args"]


def g(name: str) -> np.ndarray:
    return np.load(AC / f"{name}.npy")


model, ctx = model_and_context("tiny_ac_path", threads=2)


def test_info(model: jepa.Model) -> None:
    i = model.info
    assert model.world_model == "ac" and not model.has_predictor and not model.has_head
    got = (i.pred_kind, i.pred_action_dim, i.pred_state_dim, i.pred_grid_size**2, i.wm_embed_dim)
    assert got == (jepa.PredictorKind.AC, 7, 7, HW, i.embed_dim)
    assert i.pred_norm_reps_eps == pytest.approx(HP["normalize_reps_eps"])


@pytest.mark.parity
def test_encode_frames(ctx: jepa.Context) -> None:
    frames = g("input_clip")[0].transpose(1, 0, 2, 3)  # [T, C, H, W]
    z = world.latents(ctx, frames)
    assert_agrees(z[:1], g("z_ctx"), "z_ctx")
    assert_agrees(z[1:], g("z_goal"), "z_goal")


def test_latents_are_the_float64_layer_norm_bit_for_bit(ctx: jepa.Context) -> None:
    """The engine's non-affine LayerNorm of the AC latents returns the bits of upstream's float64
    arithmetic (jepa.planning.normalize_reps), on real encoder tokens and on rows far from zero
    mean, where a float32 LayerNorm rounds differently."""
    frames = g("input_clip")[0].transpose(1, 0, 2, 3)
    clip = np.ascontiguousarray(np.repeat(frames[:, :, None], ctx.model.info.tubelet_size, axis=2))
    tokens = ctx.encode(clip)
    eps = ctx.model.info.pred_norm_reps_eps
    np.testing.assert_array_equal(
        bits(ctx.world_latents(tokens)), bits(jepa.planning.normalize_reps(tokens, eps))
    )
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 9, ctx.model.info.embed_dim)) * 40 + 1e4).astype(np.float32)
    np.testing.assert_array_equal(bits(ctx.world_latents(x)), bits(jepa.planning.normalize_reps(x, eps)))


@pytest.mark.parity
def test_predictor(ctx: jepa.Context) -> None:
    en, acts, states = g("enc_norm"), g("ctx_actions"), g("ctx_states")
    assert_agrees(ctx.world_predict(en, acts[:, :2], states[:, :2]), g("pred_ctx2"), "pred_ctx2")
    z3 = np.concatenate([en[:, :HW], en[:, HW:], en[:, :HW]], axis=1)  # f0, f1, f0
    assert_agrees(ctx.world_predict(z3, acts, states), g("pred_ctx3"), "pred_ctx3")
    # Every prefix at once: the first frames' rows do not see the later frames (frame-causal).
    p1 = ctx.world_predict(en[:, :HW], acts[:, :1], states[:, :1])
    assert_agrees(p1, g("pred_ctx2")[:, :HW], "pred_ctx2 frame 0 from a 1-frame context")


@pytest.mark.parity
def test_rollout(ctx: jepa.Context) -> None:
    out = world.rollout_latents(
        ctx, g("z_ctx")[0], g("rollout_actions"), g("z_goal")[0], state=g("states")[0, 0], return_latents=True
    )
    assert_agrees(out["latents"], g("rollout_latents"), "rollout_latents")
    assert_rel_close(out["energies"], g("rollout_energy"), "rollout_energy", rtol=TOL)
    np.testing.assert_array_equal(out["states"], g("rollout_poses"))
    drift = world.rollout_latents(ctx, g("z_ctx")[0], g("rollout_actions"), state=g("states")[0, 0])
    assert drift["energies"].shape == g("rollout_energy").shape and "latents" not in drift


def test_batched_candidates_equal_single_rollouts(ctx: jepa.Context) -> None:
    z, s, goal, acts = g("z_ctx")[0], g("states")[0, 0], g("z_goal")[0], g("rollout_actions")
    batched = world.rollout_latents(ctx, z, acts, goal, state=s, return_latents=True)
    for k in range(len(acts)):
        single = world.rollout_latents(ctx, z, acts[k : k + 1], goal, state=s, return_latents=True)
        for key in ("energies", "latents", "states"):
            np.testing.assert_array_equal(bits(single[key][0]), bits(batched[key][k]), err_msg=key)


@pytest.mark.parity
def test_plan_reproduces_upstream_cem(ctx: jepa.Context) -> None:
    """The engine as the energy from the pixels on, only upstream's draws replayed."""
    z = world.latents(ctx, g("input_clip")[0].transpose(1, 0, 2, 3))
    ref = cem_golden(AC, "ac")
    opts = cem_options(AC, "ac")
    out = world.plan_latents(
        ctx, z[0], z[1], state=g("states")[0, 0], noise=ref["cem_noise"], trace=True, **opts
    )
    assert_cem_replays(out, ref, "ac", tol=TOL)
    assert out["energy_per_iteration"].shape == (MPC["cem_steps"],)


def test_seeded_plan_is_repeatable(ctx: jepa.Context) -> None:
    z, s, goal = g("z_ctx")[0], g("states")[0, 0], g("z_goal")[0]
    a = world.plan_latents(ctx, z, goal, state=s, samples=6, topk=3, seed=11)
    b = world.plan_latents(ctx, z, goal, state=s, samples=6, topk=3, seed=11)
    assert a["actions"].shape == (2, 7)
    np.testing.assert_array_equal(bits(a["actions"]), bits(b["actions"]))


def test_next_state_is_exported() -> None:
    s = g("states")[0, 0]
    np.testing.assert_array_equal(jepa.ac_next_state(s, g("rollout_actions")[0, 0]), g("rollout_poses")[0, 1])


def test_refusals(ctx: jepa.Context) -> None:
    en, acts, states = g("enc_norm"), g("ctx_actions"), g("ctx_states")
    # The engine checks widths and the grid, and names the refused argument.
    with pytest.raises(jepa.InvalidInputError) as e:
        ctx.world_predict(en, acts[:, :2, :6], states[:, :2])  # 6 action numbers
    assert e.value.param == "actions"
    with pytest.raises(jepa.InvalidInputError) as e:
        ctx.world_predict(en, acts[:, :2], states[:, :2, :6])  # 6 state numbers
    assert e.value.param == "states"
    with pytest.raises(jepa.InvalidInputError):
        ctx.world_predict(en, acts[:, :2], states[:, :1])  # frames disagree
    with pytest.raises(jepa.InvalidInputError) as e:
        ctx.world_predict(en, acts[:, :2])  # an AC step needs the states
    assert e.value.param == "states"
    with pytest.raises(jepa.UnsupportedError, match="grid") as e:
        ctx.world_predict(en[:, : 2 * (HW - 1)], acts[:, :2], states[:, :2])  # HW - 1 tokens per frame
    assert e.value.param == "latents"
    with pytest.raises(jepa.InvalidInputError):
        world.rollout_latents(ctx, g("z_ctx")[0], g("rollout_actions"), state=g("states")[0, 0, :6])
    with pytest.raises(jepa.UnsupportedError, match="masked predictor"):
        ctx.predict(en, [0], [1])


@pytest.mark.parity
def test_f16_weights(tmp_path: Path) -> None:
    path = convert(
        AC / "checkpoint.pt",
        tmp_path / "ac16.gguf",
        family="vjepa2_ac",
        ftype="f16",
        img_size=int(HP["img_size"]),
        head_dim=int(HP["predictor_derived"]["head_dim"]),
    )
    ctx = jepa.Model(path).context(threads=2)
    out = world.rollout_latents(
        ctx, g("z_ctx")[0], g("rollout_actions"), g("z_goal")[0], state=g("states")[0, 0], return_latents=True
    )
    assert_agrees(out["latents"], g("rollout_latents"), "rollout_latents f16", min_cos=0.9999, max_rel=1.0)


def test_flash_attention(model: jepa.Model) -> None:
    """The flash path (f16 frame-causal mask; the default on GPUs and for long CPU sequences)."""
    ctx = model.context(threads=2, flash_attn=True)
    z, s, goal, acts = g("z_ctx")[0], g("states")[0, 0], g("z_goal")[0], g("rollout_actions")
    out = world.rollout_latents(ctx, z, acts, goal, state=s, return_latents=True)
    assert_agrees(out["latents"], g("rollout_latents"), "rollout_latents (flash)")
    assert_rel_close(out["energies"], g("rollout_energy"), "rollout_energy (flash)", rtol=TOL)
    for k in range(len(acts)):
        single = world.rollout_latents(ctx, z, acts[k : k + 1], goal, state=s, return_latents=True)
        np.testing.assert_array_equal(bits(single["latents"][0]), bits(out["latents"][k]))


def test_threads_do_not_change_the_bits(model: jepa.Model) -> None:
    z, s, goal, acts = g("z_ctx")[0], g("states")[0, 0], g("z_goal")[0], g("rollout_actions")
    runs = [
        world.rollout_latents(model.context(threads=t), z, acts, goal, state=s, return_latents=True)[
            "latents"
        ]
        for t in (1, 2, 3)
    ]
    for r in runs[1:]:
        np.testing.assert_array_equal(bits(r), bits(runs[0]))
