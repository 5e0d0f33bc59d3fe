"""LeWM on the engine against the le-wm goldens (../shared/reference/lewm): the embedding, the
action embedder and predictor, rollouts and costs, the CEM planner with the engine as the cost and
upstream's draws replayed; batched candidates equal single ones bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import jepa
from jepa import world
from jepa.convert import convert

from conftest import LEWM_BUNDLE, bits, model_and_context
from numpy_reference import assert_agrees, assert_cem_replays, assert_rel_close, cem_golden, cem_options

LEWM = LEWM_BUNDLE
# @pytest.mark.parity: within a tolerance of the goldens in the exact class, run on the default path alone;
# the rest (bit identity, and tests that check bits and a tolerance) on every kernel path.
pytestmark = [pytest.mark.torch, pytest.mark.every_path]
TOL = 1e-5
# Sizes and planner settings from the bundle itself, so an independent bundle runs unchanged.
HP = json.loads((LEWM / "hparams.json").read_text())
CEM = HP["cem"]
A = int(HP["action_dim"])


def g(name: str) -> np.ndarray:
    return np.load(LEWM / f"{name}.npy")


def predicted(ctx: jepa.Context, history: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """`JEPA.rollout`'s predicted_emb [K, T + 1, D] through the engine."""
    return world.rollout_latents(ctx, history, candidates, return_latents=True)["latents"]


model, ctx = model_and_context("tiny_lewm_path", threads=2)


def test_info(model: jepa.Model) -> None:
    i = model.info
    assert model.world_model == "lewm" and not model.has_predictor and not model.has_head
    got = (i.pred_kind, i.pred_n_frames, i.pred_action_dim, i.wm_embed_dim)
    assert got == (jepa.PredictorKind.LEWM, HP["history_size"], A, g("emb").shape[-1])
    assert jepa.default_pool(model) == "lewm"


def test_embedding(ctx: jepa.Context, model: jepa.Model) -> None:
    pixels = g("pixels")[0]
    tokens = ctx.encode(pixels[:3])
    assert_agrees(tokens, g("enc_tokens"), "enc_tokens")
    assert_agrees(ctx.world_latents(g("enc_cls")[:, None])[:, 0], g("emb")[0], "emb from enc_cls")
    emb = world.latents(ctx, pixels[:3])
    assert_agrees(emb, g("emb")[0], "emb")
    assert_agrees(world.latents(ctx, pixels[3:]), g("goal_emb")[0], "goal_emb")
    # The 'lewm' pool is the same function: same bits, batched or one at a time.
    np.testing.assert_array_equal(bits(jepa.pool(tokens, "lewm", ctx)), bits(emb))
    np.testing.assert_array_equal(bits(jepa.pool(tokens, None, ctx)), bits(emb))
    with pytest.raises(jepa.InvalidInputError, match="pass the Context"):
        jepa.pool(tokens, "lewm", model)  # the projector runs on a context, never a hidden one
    for i in range(3):
        np.testing.assert_array_equal(bits(world.latents(ctx, pixels[i : i + 1])), bits(emb[i : i + 1]))


def test_predictor(ctx: jepa.Context) -> None:
    parts = ctx.world_predict(g("emb"), g("actions"), taps=True)
    assert_agrees(parts["act_emb"], g("act_emb"), "act_emb")
    assert_agrees(parts["pred_raw"], g("pred_raw"), "pred_raw")
    assert_agrees(parts["pred"], g("pred"), "pred")
    np.testing.assert_array_equal(bits(ctx.world_predict(g("emb"), g("actions"))), bits(parts["pred"]))


@pytest.mark.parity
def test_rollouts_and_cost(ctx: jepa.Context) -> None:
    emb = world.latents(ctx, g("pixels")[0])  # history and goal from the pixels, through the engine
    assert_agrees(predicted(ctx, emb[:1], g("cand_eval")[0]), g("rollout_h1")[0], "rollout_h1")
    assert_agrees(predicted(ctx, emb[:3], g("cand_hist")[0]), g("rollout_h3")[0], "rollout_h3")
    cost = world.rollout_latents(ctx, emb[:1], g("cand_eval")[0], emb[3])["costs"]
    assert_rel_close(cost, g("cost_eval")[0], "cost_eval", rtol=TOL)


def test_batched_candidates_equal_single_rollouts(ctx: jepa.Context) -> None:
    emb = world.latents(ctx, g("pixels")[0])
    for hist, cand in ((emb[:1], g("cand_eval")[0]), (emb[:3], g("cand_hist")[0])):
        batched = predicted(ctx, hist, cand)
        for k in range(len(cand)):
            np.testing.assert_array_equal(bits(predicted(ctx, hist, cand[k : k + 1])[0]), bits(batched[k]))
    rng = np.random.default_rng(3)
    cand = rng.standard_normal((40, 5, A), dtype=np.float32)  # more than max_batch: chunked graphs
    ctx.max_batch = 16
    try:
        batched = world.rollout_latents(ctx, emb[:1], cand, emb[3])["costs"]
    finally:
        ctx.max_batch = 32
    single = np.concatenate(
        [world.rollout_latents(ctx, emb[:1], cand[k : k + 1], emb[3])["costs"] for k in range(len(cand))]
    )
    np.testing.assert_array_equal(bits(batched), bits(single))


@pytest.mark.parity
def test_plan_reproduces_upstream_cem(ctx: jepa.Context) -> None:
    """The engine as the cost, only upstream's draws replayed: same elites, same plan."""
    emb = world.latents(ctx, g("pixels")[0])
    ref = cem_golden(LEWM, "lewm")
    out = world.plan_latents(
        ctx, emb[:1], emb[3], noise=ref["cem_noise"], trace=True, **cem_options(LEWM, "lewm")
    )
    assert_cem_replays(out, ref, "lewm", tol=TOL)
    assert out["actions"].shape == (CEM["horizon"], A)
    assert out["cost_per_iteration"].shape == (CEM["n_steps"],)


def test_seeded_plan_is_repeatable(ctx: jepa.Context) -> None:
    emb = world.latents(ctx, g("pixels")[0])
    a = world.plan_latents(ctx, emb[:1], emb[3], num_samples=12, topk=4, n_steps=2, horizon=3, seed=7)
    b = world.plan_latents(ctx, emb[:1], emb[3], num_samples=12, topk=4, n_steps=2, horizon=3, seed=7)
    np.testing.assert_array_equal(bits(a["actions"]), bits(b["actions"]))


def test_refusals(ctx: jepa.Context) -> None:
    emb, acts = g("emb"), g("actions")
    with pytest.raises(jepa.InvalidInputError, match="window"):
        ctx.world_predict(np.concatenate([emb, emb], axis=1), np.concatenate([acts, acts], axis=1))
    with pytest.raises(jepa.InvalidInputError, match="actions") as e:
        ctx.world_predict(emb, acts[:, :, : A - 1])
    assert e.value.param == "actions"
    with pytest.raises(jepa.InvalidInputError):
        ctx.world_predict(emb, acts[:, :2])
    with pytest.raises(jepa.InvalidInputError):
        predicted(ctx, emb[0], g("cand_eval")[0, :, :2])  # 3 history frames, 2 actions
    with pytest.raises(jepa.InvalidInputError) as e:
        ctx.world_predict(emb, acts, np.zeros((*acts.shape[:2], 7), np.float32))  # LeWM takes no states
    assert e.value.param == "states"
    with pytest.raises(jepa.UnsupportedError, match="masked predictor"):
        ctx.predict(g("enc_tokens")[:1], [0], [1])


@pytest.mark.parity
def test_f16_weights(tmp_path: Path) -> None:
    ctx = jepa.Model(convert(LEWM, tmp_path / "lewm16.gguf", family="lewm", ftype="f16")).context(threads=2)
    emb = world.latents(ctx, g("pixels")[0])
    assert_agrees(emb[:3], g("emb")[0], "emb f16", min_cos=0.9999, max_rel=1.0)
    assert_agrees(
        predicted(ctx, emb[:1], g("cand_eval")[0]),
        g("rollout_h1")[0],
        "rollout_h1 f16",
        min_cos=0.9999,
        max_rel=1.0,
    )


def test_threads_do_not_change_the_bits(model: jepa.Model) -> None:
    emb = g("emb")[0]
    runs = [predicted(model.context(threads=t), emb[:1], g("cand_eval")[0]) for t in (1, 2, 3)]
    for r in runs[1:]:
        np.testing.assert_array_equal(bits(r), bits(runs[0]))
