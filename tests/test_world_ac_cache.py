"""Cached V-JEPA 2-AC rollouts (Context.world_rollout, the default of jepa.world's rollouts and
plans) give the bits of upstream's loop, which recomputes every prefix (cache=False: one
world_predict graph of every frame so far per step): energies, latents, poses and the CEM's means,
stds and chosen actions, compared as float32 bit patterns. On the reference bundle's model with its
inputs and replayed CEM draws, and on a random model whose 2 x 2 grid gives frames of 6 tokens (a
first frame's attention over 6 keys, where the engine has a few-key kernel), batched in chunks by
max_batch and by max_graph_bytes, which counts the cache."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jepa
from jepa import planning, world
from jepa.planning.rollout import ac_predicted_frames, ac_states
from jepa.testing.random_world import write_random_ac

from conftest import AC_BUNDLE, bits, model_and_context
from numpy_reference import assert_agrees, cem_golden, cem_options

AC = AC_BUNDLE
pytestmark = [pytest.mark.torch, pytest.mark.every_path]
HP = json.loads((AC / "hparams.json").read_text())


def g(name: str) -> np.ndarray:
    return np.load(AC / f"{name}.npy")


model, ctx = model_and_context("tiny_ac_path", threads=2)


@pytest.fixture(scope="module")
def grid2_ctx(tmp_path_factory: pytest.TempPathFactory) -> jepa.Context:
    """A random AC file: 3 layers, 2 x 2 patches (6 tokens a frame), encoder width 48 != 32."""
    path = write_random_ac(tmp_path_factory.mktemp("ac_cache") / "grid2.gguf", embed_dim=32, n_layer=3,
                           n_head=2, enc_dim=48, enc_heads=2, img_size=32, patch_size=16, seed=9)
    return jepa.Model(path).context(threads=2)


def candidates(ctx: jepa.Context, k: int, h: int, seed: int) -> tuple[np.ndarray, ...]:
    """A context frame, a goal, a state and K x H actions for the context's model."""
    hw, d = ctx.model.info.pred_grid_size ** 2, ctx.model.info.embed_dim
    rng = np.random.default_rng(seed)
    norm = lambda x: planning.normalize_reps(x.astype(np.float32))  # noqa: E731
    z, goal = norm(rng.standard_normal((hw, d))), norm(rng.standard_normal((hw, d)))
    state = np.array([0.3, -0.2, 0.4, 0.1, -0.3, 0.2, 0.5], np.float32)
    acts = (0.05 * rng.standard_normal((k, h, 7))).astype(np.float32)
    return z, goal, state, acts


def assert_same_rollout(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if key == "best":
            assert a[key] == b[key]
        else:
            np.testing.assert_array_equal(bits(a[key]), bits(b[key]), err_msg=key)


def upstream_frames(ctx: jepa.Context, z: np.ndarray, acts: np.ndarray, states: np.ndarray) -> np.ndarray:
    eps = ctx.model.info.pred_norm_reps_eps
    return ac_predicted_frames(world.predictor(ctx), z, acts, states, eps)


# ---- the engine call: cache on, off, and upstream's loop over world_predict ---------------------


@pytest.mark.parametrize("h", [1, 2, 4])
def test_world_rollout_is_upstreams_loop_bit_for_bit(ctx: jepa.Context, h: int) -> None:
    z, _, state, acts = candidates(ctx, 5, h, seed=h)
    states = np.ascontiguousarray(ac_states(state, acts)[:, :h])
    ref = upstream_frames(ctx, z, acts, states)
    for cache in (True, False):
        got = ctx.world_rollout(z, acts, states, cache=cache)
        assert got.shape == (5, h, len(z), z.shape[1])
        np.testing.assert_array_equal(bits(got), bits(ref), err_msg=f"cache={cache}")


def test_a_few_keys_and_deeper_layers_keep_the_bits(grid2_ctx: jepa.Context) -> None:
    """Frame 0 alone is 6 keys, a 3-frame prefix 18: the predictor's attention takes one kernel for
    both, so frame 0's rows computed alone equal those of the longer masked prefix."""
    z, goal, state, acts = candidates(grid2_ctx, 6, 3, seed=1)
    on = world.rollout_latents(grid2_ctx, z, acts, goal, state=state, return_latents=True)
    off = world.rollout_latents(grid2_ctx, z, acts, goal, state=state, return_latents=True, cache=False)
    assert_same_rollout(on, off)


def test_chunks_by_max_batch_and_by_the_cache_budget(ctx: jepa.Context, model: jepa.Model) -> None:
    """The cache counts in max_graph_bytes: a budget of a few candidates' cache and step graph splits
    the call into smaller chunks, with the same bits; a budget below one candidate's is refused."""
    k, h = 9, 4
    z, _, state, acts = candidates(ctx, k, h, seed=5)
    states = np.ascontiguousarray(ac_states(state, acts)[:, :h])
    ref = ctx.world_rollout(z, acts, states)
    i = model.info
    per_candidate = 2 * i.pred_n_layer * (h - 1) * (2 + i.pred_grid_size ** 2) * i.pred_embed_dim * 4
    for small in (model.context(threads=2, max_batch=2),
                  model.context(threads=2, max_graph_bytes=4 * per_candidate)):
        np.testing.assert_array_equal(bits(small.world_rollout(z, acts, states)), bits(ref))
    tight = model.context(threads=2, max_graph_bytes=per_candidate)
    with pytest.raises(jepa.ResourceLimitError, match="key/value cache"):
        tight.world_rollout(z, acts, states)
    # The recomputed rollout keeps no cache: its own graph alone counts.
    np.testing.assert_array_equal(bits(tight.world_rollout(z, acts[:, :1], states[:, :1], cache=False)),
                                  bits(ref[:, :1]))


def test_plain_attention_agrees_within_rounding(model: jepa.Model) -> None:
    """flash_attn=False is ggml's softmax, whose sum over a longer masked row rounds differently: the
    cache agrees within the parity bars there, not bit for bit."""
    plain = model.context(threads=2, flash_attn=False)
    z, _, state, acts = candidates(plain, 4, 3, seed=2)
    states = np.ascontiguousarray(ac_states(state, acts)[:, :3])
    assert_agrees(plain.world_rollout(z, acts, states), upstream_frames(plain, z, acts, states),
                  "cache, plain attention")


# ---- jepa.world: rollouts and plans, cache on and off -------------------------------------------


def test_bundle_rollout_cache_on_and_off(ctx: jepa.Context) -> None:
    z, s, goal, acts = g("z_ctx")[0], g("states")[0, 0], g("z_goal")[0], g("rollout_actions")
    on = world.rollout_latents(ctx, z, acts, goal, state=s, return_latents=True)
    off = world.rollout_latents(ctx, z, acts, goal, state=s, return_latents=True, cache=False)
    assert_same_rollout(on, off)
    assert_agrees(on["latents"], g("rollout_latents"), "rollout_latents (cached)")
    drift_on = world.rollout_latents(ctx, z, acts, state=s)
    assert_same_rollout(drift_on, world.rollout_latents(ctx, z, acts, state=s, cache=False))


def test_bundle_plan_cache_on_and_off(ctx: jepa.Context) -> None:
    """Meta's CEM on the bundle's pixels with its draws replayed: every iteration's samples, energies,
    elites, means and stds, and the plan, the same bits with and without the cache."""
    z = world.latents(ctx, g("input_clip")[0].transpose(1, 0, 2, 3))
    noise = cem_golden(AC, "ac")["cem_noise"]
    opts = cem_options(AC, "ac")
    s = g("states")[0, 0]
    on = world.plan_latents(ctx, z[0], z[1], state=s, noise=noise, trace=True, **opts)
    off = world.plan_latents(ctx, z[0], z[1], state=s, noise=noise, trace=True, cache=False, **opts)
    assert set(on) >= {"actions", "energy_per_iteration", "mean", "std", "topk", "energies"}
    for key in on:
        a, b = np.asarray(on[key]), np.asarray(off[key])
        if a.dtype == np.float32:
            np.testing.assert_array_equal(bits(a), bits(b), err_msg=key)
        else:
            np.testing.assert_array_equal(a, b, err_msg=key)
    np.testing.assert_allclose(on["actions"], g("cem_action"), rtol=0, atol=1e-5)


def test_seeded_plan_on_a_longer_horizon(grid2_ctx: jepa.Context) -> None:
    z, goal, state, _ = candidates(grid2_ctx, 1, 1, seed=3)
    opts = dict(samples=10, topk=4, cem_steps=2, horizon=3, seed=7)
    on = world.plan_latents(grid2_ctx, z, goal, state=state, **opts)
    off = world.plan_latents(grid2_ctx, z, goal, state=state, cache=False, **opts)
    for key in ("actions", "energy_per_iteration"):
        np.testing.assert_array_equal(bits(on[key]), bits(off[key]), err_msg=key)


def test_frames_in_pipeline_cache_on_and_off(ctx: jepa.Context) -> None:
    u8, s = g("frames_u8"), g("states")[0, 0]
    acts = g("rollout_actions")
    on = jepa.rollout(ctx, u8[0], acts, goal=u8[1], state=s, return_latents=True)
    off = jepa.rollout(ctx, u8[0], acts, goal=u8[1], state=s, return_latents=True, cache=False)
    assert_same_rollout(on, off)


def test_stop_is_asked_before_each_chunk(model: jepa.Model) -> None:
    c = model.context(threads=2, max_batch=2)
    z, goal, state, acts = candidates(c, 5, 2, seed=4)
    asked = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 2

    with pytest.raises(world.Stopped):
        world.rollout_latents(c, z, acts, goal, state=state, stop=stop)
    assert len(asked) == 3  # candidates [0, 2), [2, 4), then stopped before [4, 5)


# ---- refusals ------------------------------------------------------------------------------------


def test_world_rollout_refusals(ctx: jepa.Context, tiny_lewm_path: str) -> None:
    z, _, state, acts = candidates(ctx, 2, 2, seed=6)
    states = np.ascontiguousarray(ac_states(state, acts)[:, :2])
    cases = [
        ((z[:, :-1], acts, states), jepa.InvalidInputError, "context"),
        ((z[:-1], acts, states), jepa.UnsupportedError, "context"),
        ((z, acts[..., :6], states), jepa.InvalidInputError, "actions"),
        ((z, acts, states[..., :6]), jepa.InvalidInputError, "states"),
        ((z, acts, states[:1]), jepa.InvalidInputError, "states"),
        ((z[None], acts, states), jepa.InvalidInputError, "context"),
    ]
    for args, err, param in cases:
        with pytest.raises(err) as info:
            ctx.world_rollout(*args)
        assert info.value.param == param, (param, info.value)
    bad = z.copy()
    bad[1, 2] = np.nan
    with pytest.raises(jepa.InvalidInputError) as info:
        ctx.world_rollout(bad, acts, states)
    assert info.value.param == "context"
    lewm = jepa.Model(tiny_lewm_path).context(threads=1)
    with pytest.raises(jepa.UnsupportedError) as info:
        lewm.world_rollout(np.zeros((1, lewm.model.info.wm_embed_dim), np.float32), acts, states)
    assert info.value.param == "kind"


def test_the_cache_is_the_default() -> None:
    assert jepa._engine.world_rollout_default_params().cache == 1
