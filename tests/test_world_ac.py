"""V-JEPA 2-AC on the engine against Meta's goldens (../shared/reference/vjepa2_ac): the encode step,
the action-conditioned predictor, rollouts and energies, and Meta's CEM with the engine as the
energy and upstream's draws replayed; batched candidates equal single rollouts bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import REFERENCE_DIR

import jepa
from jepa.convert import convert
from jepa.planning.reference import assert_agrees, assert_rel_close

AC = REFERENCE_DIR / "vjepa2_ac"
pytestmark = pytest.mark.torch
TOL = 1e-5
# Sizes and planner settings from the bundle itself, so an independent bundle runs unchanged.
HP = json.loads((AC / "hparams.json").read_text())
HW = int(HP["tokens_per_frame"])
MPC = HP["mpc_args"]


def g(name: str) -> np.ndarray:
    return np.load(AC / f"{name}.npy")


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> jepa.Model:
    out = Path(tmp_path_factory.mktemp("ac")) / "ac.gguf"
    return jepa.Model(convert(AC / "checkpoint.pt", out, family="vjepa2_ac", img_size=int(HP["img_size"]),
                              head_dim=int(HP["predictor_derived"]["head_dim"])))


@pytest.fixture(scope="module")
def ctx(model: jepa.Model) -> jepa.Context:
    return model.context(threads=2)


def test_info(model: jepa.Model) -> None:
    i = model.info
    assert model.world_model == "ac" and not model.has_predictor
    got = (i["pred_kind"], i["pred_action_dim"], i["pred_state_dim"], i["pred_grid_size"] ** 2)
    assert got == ("ac", 7, 7, HW)
    assert i["pred_norm_reps_eps"] == pytest.approx(HP["normalize_reps_eps"])


def test_encode_frames(ctx: jepa.Context) -> None:
    frames = g("input_clip")[0].transpose(1, 0, 2, 3)  # [T, C, H, W]
    z = ctx.ac_encode(frames)
    assert_agrees(z[:1], g("z_ctx"), "z_ctx")
    assert_agrees(z[1:], g("z_goal"), "z_goal")


def test_predictor(ctx: jepa.Context) -> None:
    en, acts, states = g("enc_norm"), g("ctx_actions"), g("ctx_states")
    assert_agrees(ctx.ac_predict(en, acts[:, :2], states[:, :2]), g("pred_ctx2"), "pred_ctx2")
    z3 = np.concatenate([en[:, :HW], en[:, HW:], en[:, :HW]], axis=1)  # f0, f1, f0
    assert_agrees(ctx.ac_predict(z3, acts, states), g("pred_ctx3"), "pred_ctx3")
    # Every prefix at once: the first frames' rows do not see the later frames (frame-causal).
    p1 = ctx.ac_predict(en[:, :HW], acts[:, :1], states[:, :1])
    assert_agrees(p1, g("pred_ctx2")[:, :HW], "pred_ctx2 frame 0 from a 1-frame context")


def test_rollout(ctx: jepa.Context) -> None:
    out = ctx.ac_rollout(g("z_ctx")[0], g("states")[0, 0], g("rollout_actions"), g("z_goal")[0],
                         return_latents=True)
    assert_agrees(out["latents"], g("rollout_latents"), "rollout_latents")
    assert_rel_close(out["energies"], g("rollout_energy"), "rollout_energy", rtol=TOL)
    np.testing.assert_array_equal(out["states"], g("rollout_poses"))
    drift = ctx.ac_rollout(g("z_ctx")[0], g("states")[0, 0], g("rollout_actions"))
    assert drift["energies"].shape == g("rollout_energy").shape and "latents" not in drift


def test_batched_candidates_equal_single_rollouts(ctx: jepa.Context) -> None:
    z, s, goal, acts = g("z_ctx")[0], g("states")[0, 0], g("z_goal")[0], g("rollout_actions")
    batched = ctx.ac_rollout(z, s, acts, goal, return_latents=True)
    for k in range(len(acts)):
        single = ctx.ac_rollout(z, s, acts[k : k + 1], goal, return_latents=True)
        for key in ("energies", "latents", "states"):
            np.testing.assert_array_equal(bits(single[key][0]), bits(batched[key][k]), err_msg=key)


def test_plan_reproduces_upstream_cem(ctx: jepa.Context) -> None:
    """The engine as the energy from the pixels on, only upstream's draws replayed."""
    z = ctx.ac_encode(g("input_clip")[0].transpose(1, 0, 2, 3))
    out = ctx.ac_plan(z[0], g("states")[0, 0], z[1], horizon=MPC["rollout"], samples=MPC["samples"],
                      topk=MPC["topk"], cem_steps=MPC["cem_steps"], momentum_mean=MPC["momentum_mean"],
                      momentum_mean_gripper=MPC["momentum_mean_gripper"], momentum_std=MPC["momentum_std"],
                      momentum_std_gripper=MPC["momentum_std_gripper"], maxnorm=MPC["maxnorm"],
                      noise=g("cem_noise"), trace=True)
    assert_rel_close(out["energies"], g("cem_energy"), "cem_energy", rtol=TOL)
    np.testing.assert_array_equal(out["topk"], g("cem_topk"))
    for key in ("samples", "mean", "std"):
        np.testing.assert_allclose(out[key], g(f"cem_{key}"), rtol=0, atol=TOL, err_msg=key)
    np.testing.assert_allclose(out["actions"], g("cem_action"), rtol=0, atol=TOL)
    assert out["energy_per_iteration"].shape == (MPC["cem_steps"],)


def test_seeded_plan_is_repeatable(ctx: jepa.Context) -> None:
    z, s, goal = g("z_ctx")[0], g("states")[0, 0], g("z_goal")[0]
    a = ctx.ac_plan(z, s, goal, samples=6, topk=3, seed=11)
    b = ctx.ac_plan(z, s, goal, samples=6, topk=3, seed=11)
    assert a["actions"].shape == (2, 7)
    np.testing.assert_array_equal(bits(a["actions"]), bits(b["actions"]))


def test_next_state_is_exported() -> None:
    s = g("states")[0, 0]
    np.testing.assert_array_equal(jepa.ac_next_state(s, g("rollout_actions")[0, 0]), g("rollout_poses")[0, 1])


def test_refusals(ctx: jepa.Context) -> None:
    en, acts, states = g("enc_norm"), g("ctx_actions"), g("ctx_states")
    with pytest.raises(jepa.InvalidInputError):
        ctx.ac_predict(en, acts[:, :2, :6], states[:, :2])  # 6 action numbers
    with pytest.raises(jepa.InvalidInputError):
        ctx.ac_predict(en, acts[:, :2], states[:, :1])  # frames disagree
    with pytest.raises(jepa.UnsupportedError, match="grid"):
        ctx.ac_predict(en[:, : 2 * (HW - 1)], acts[:, :2], states[:, :2])  # HW - 1 tokens per frame
    with pytest.raises(jepa.InvalidInputError):
        ctx.ac_rollout(g("z_ctx")[0], g("states")[0, 0, :6], g("rollout_actions"))
    with pytest.raises(jepa.UnsupportedError, match="LeWM"):
        ctx.lewm_predict(en[:, :1], np.zeros((1, 1, 7), np.float32))
    with pytest.raises(jepa.UnsupportedError, match="masked predictor"):
        ctx.predict(en, [0], [1])


def test_f16_weights(tmp_path: Path) -> None:
    path = convert(AC / "checkpoint.pt", tmp_path / "ac16.gguf", family="vjepa2_ac", ftype="f16",
                   img_size=int(HP["img_size"]), head_dim=int(HP["predictor_derived"]["head_dim"]))
    ctx = jepa.Model(path).context(threads=2)
    out = ctx.ac_rollout(g("z_ctx")[0], g("states")[0, 0], g("rollout_actions"), g("z_goal")[0],
                         return_latents=True)
    assert_agrees(out["latents"], g("rollout_latents"), "rollout_latents f16", min_cos=0.9999, max_rel=1.0)


def test_flash_attention(model: jepa.Model) -> None:
    """The flash path (f16 frame-causal mask; the default on GPUs and for long CPU sequences)."""
    ctx = model.context(threads=2, flash_attn=True)
    z, s, goal, acts = g("z_ctx")[0], g("states")[0, 0], g("z_goal")[0], g("rollout_actions")
    out = ctx.ac_rollout(z, s, acts, goal, return_latents=True)
    assert_agrees(out["latents"], g("rollout_latents"), "rollout_latents (flash)")
    assert_rel_close(out["energies"], g("rollout_energy"), "rollout_energy (flash)", rtol=TOL)
    for k in range(len(acts)):
        single = ctx.ac_rollout(z, s, acts[k : k + 1], goal, return_latents=True)
        np.testing.assert_array_equal(bits(single["latents"][0]), bits(out["latents"][k]))


def test_threads_do_not_change_the_bits(model: jepa.Model) -> None:
    z, s, goal, acts = g("z_ctx")[0], g("states")[0, 0], g("z_goal")[0], g("rollout_actions")
    runs = [model.context(threads=t).ac_rollout(z, s, acts, goal, return_latents=True)["latents"]
            for t in (1, 2, 3)]
    for r in runs[1:]:
        np.testing.assert_array_equal(bits(r), bits(runs[0]))
