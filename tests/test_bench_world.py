"""The random world-model writers (jepa.testing.random_world), tools/bench/world.py --smoke with the
upstream side (cc-vjepa2's V-JEPA 2-AC predictor, stable-worldmodel's LeWM and CEMSolver) and without
it, and the upstream side itself against the reference bundles' goldens, driven the way the benchmark
drives it (bench.world_models)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import jepa
from jepa import world
from jepa.cpu import cpu_info
from jepa.testing.random_world import write_random_ac, write_random_lewm

from conftest import import_tool, smoke_record


def test_random_ac_loads_and_predicts(tmp_path: Path) -> None:
    for ft in ("f32", "f16"):
        m = jepa.Model(write_random_ac(tmp_path / f"ac-{ft}.gguf", embed_dim=64, n_layer=2, n_head=2,
                                       enc_dim=48, enc_heads=1, img_size=32, ftype=ft))
        assert m.world_model == "ac"
        info = m.info
        assert (info.pred_embed_dim, info.pred_n_layer, info.embed_dim) == (64, 2, 48)
        assert info.pred_action_dim == info.pred_state_dim == 7
        ctx = m.context(threads=1)
        hw = 4  # (32 / 16)^2
        rng = np.random.default_rng(0)
        lat = rng.standard_normal((2, 2 * hw, 48)).astype(np.float32)
        out = ctx.world_predict(lat, np.zeros((2, 2, 7), np.float32), np.zeros((2, 2, 7), np.float32))
        assert isinstance(out, np.ndarray) and out.shape == (2, 2 * hw, 48) and np.isfinite(out).all()
        plan = world.plan_latents(ctx, lat[0, :hw], lat[1, :hw], np.zeros(7, np.float32), samples=8, topk=3,
                                  cem_steps=1)
        assert plan["actions"].shape == (2, 7)


def test_random_lewm_loads_and_plans(tmp_path: Path) -> None:
    for ft in ("f32", "f16"):
        path = write_random_lewm(tmp_path / f"lewm-{ft}.gguf", enc_dim=32, enc_layers=1, enc_heads=2,
                                 img_size=28,
                                 embed_dim=32, n_layer=1, n_head=2, head_dim=16, ffn_dim=64, proj_hidden=64,
                                 ftype=ft)
        m = jepa.Model(path)
        assert m.world_model == "lewm"
        assert (m.info.wm_embed_dim, m.info.pred_action_dim, m.info.pred_n_frames) == (32, 10, 3)
        ctx = m.context(threads=1)
        emb = ctx.world_latents(ctx.encode(np.zeros((1, 3, 28, 28), np.float32)))[:, 0]
        assert emb.shape == (1, 32) and np.isfinite(emb).all()
        pred = ctx.world_predict(np.zeros((4, 3, 32), np.float32), np.zeros((4, 3, 10), np.float32))
        assert isinstance(pred, np.ndarray) and pred.shape == (4, 3, 32)
        plan = world.plan_latents(ctx, emb, emb[0], num_samples=8, topk=3, n_steps=2, horizon=5)
        assert plan["actions"].shape == (5, 10)


def _smoke(tmp_path: Path, *extra: str) -> dict[str, Any]:
    data = smoke_record("bench/world.py", tmp_path / "w.json", "--threads", "1", *extra)
    cells = {(c["cell"], c["K"], c.get("H")) for c in data["cells"]}
    per_k = (("ac_step", 2), ("ac_cem_iter", 2), ("ac_cem_iter", 4))
    ac = {(cell, k, h) for k in (16, 64) for cell, h in per_k}
    assert cells == ac | {("lewm_step", 16, None), ("lewm_plan", 16, None)}
    assert all(c["rounds"] == 1 for c in data["cells"])
    assert "LeWM plan" in import_tool("render_docs").render_bench_world(data)
    return data


@pytest.mark.torch
@pytest.mark.cpu_class
def test_bench_world_smoke_with_upstream(tmp_path: Path) -> None:
    data = _smoke(tmp_path)
    assert data["upstream"].startswith("measured side by side")
    assert {"torch", "cc-vjepa2", "stable-worldmodel"} <= set(data["versions"])
    assert data["machine"]["simd"] and data["machine"]["torch_threads"] == 1
    assert data["machine"]["cpu_mask"] == cpu_info().mask and data["held"]["jepa"] == cpu_info().kernels
    assert data["upstream_detail"]["torch_threads"] == data["upstream_detail"]["jepa_threads"] == 1
    for c in data["cells"]:
        assert set(c["ms"]) == set(c["samples_ms"]) == {"f32", "f16", "bf16", "upstream"}
        assert set(c["ratio_upstream_over"]) == set(c["ratio_of_medians"]) == {"f32", "f16", "bf16"}
        # 1.5x everywhere but the AC CEM iteration at H = 4: 2x (10 frame blocks upstream, 4 cached).
        assert c["goal"] == (2.0 if c.get("H") == 4 else 1.5) and isinstance(c["meets_goal"], bool)
        # The half class's 3x is set only where the bf16 files run on bf16 instructions (as the engine
        # sees the CPU: a mask without bf16 has none).
        half = data["machine"]["bf16_hardware"]
        assert half == cpu_info().bf16
        assert ("meets_half_goal" in c) == half and (not half or c["half_goal"] == 3.0)
        assert all(set(v) == {"f32", "f16", "bf16"} for v in c["agreement"].values())
    agree = {(c["cell"], c["K"], c.get("H")): c["agreement"] for c in data["cells"]}
    # The same weights on both sides: the predictors agree to float32 rounding (f16 weights: ~1e-3).
    assert data["checks"]["ac_predictor"]["max_rel_err"]["f32"] < 1e-5
    for k in (16, 64):
        assert agree[("ac_step", k, 2)]["predicted_latents_max_rel_err"]["f32"] < 1e-5
        assert agree[("ac_step", k, 2)]["predicted_latents_max_rel_err"]["f16"] < 1e-2
        for h in (2, 4):
            assert agree[("ac_cem_iter", k, h)]["energy_max_rel_err"]["f32"] < 1e-5
    assert agree[("lewm_step", 16, None)]["predicted_emb_max_rel_err"]["f32"] < 1e-5
    # jepa replays the solver's draws, so the f32 plans are upstream's.
    assert agree[("lewm_plan", 16, None)]["plan_actions_max_rel_err"]["f32"] < 1e-5
    assert agree[("lewm_plan", 16, None)]["final_elite_cost_rel_err"]["f32"] < 1e-5


@pytest.mark.cpu_class
def test_bench_world_smoke_jepa_only(tmp_path: Path) -> None:
    data = _smoke(tmp_path, "--no-upstream")
    assert data["upstream"] == "not measured in this run (--no-upstream)"
    assert all(set(c["ms"]) == {"f32", "f16", "bf16"} for c in data["cells"])
    assert not any("ratio_upstream_over" in c for c in data["cells"])


@pytest.mark.cpu_class
@pytest.mark.skipif("avx2" not in cpu_info().detected, reason="stands for the AVX2 class: a CPU with AVX2")
def test_bench_world_smoke_avx2_holds_both_sides(tmp_path: Path) -> None:
    """--cpu x86-64-v3 (JEPA_CPU_FEATURES for the run): the engine runs its AVX2 kernels for every file
    type (no bf16 hardware counted), PyTorch's switches are set to the class, and the record says so;
    --ftypes trims jepa's files but keeps f32, the goals' reference."""
    data = _smoke(tmp_path, "--no-upstream", "--cpu", "x86-64-v3", "--ftypes", "bf16")
    m = data["machine"]
    assert m["cpu_mask"] == m["env"]["JEPA_CPU_FEATURES"] == data["held"]["mask"] == "x86-64-v3"
    assert m["kernels"] == "f32/f16: avx2-fma; bf16: avx2-fma; q8_0: avx2" and set(m["features"]) == {"avx2"}
    assert m["bf16_hardware"] is False
    if m["features_detected"] != ["avx2"]:  # a CPU with more: the peers' switches are held to the class
        assert m["env"]["ATEN_CPU_CAPABILITY"] == "avx2" and m["env"]["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
        assert "Both sides held to the x86-64-v3 class" in import_tool("render_docs").render_bench_world(data)
    assert all(set(c["ms"]) == {"f32", "bf16"} for c in data["cells"])


@pytest.fixture(scope="module")
def upstream() -> Any:
    return import_tool("bench.world_models").load_upstream(threads=1)


@pytest.mark.torch
@pytest.mark.filterwarnings(r"ignore:.*sdp_kernel\(\)` is deprecated:FutureWarning")
def test_upstream_ac_predictor_is_metas(upstream: Any, ac_bundle: Path) -> None:
    """cc-vjepa2's vit_ac_predictor, loaded from the bundle's checkpoint as Meta's hub code loads it,
    gives the golden pred_ctx2 (computed by Meta's vjepa2 at c2963a4) to float32 rounding."""
    torch, ac = upstream.torch, ac_bundle
    hp = json.loads((ac / "hparams.json").read_text())["predictor_args"]
    keys = ("patch_size", "num_frames", "tubelet_size", "embed_dim", "predictor_embed_dim", "depth",
            "num_heads", "action_embed_dim", "is_frame_causal", "use_rope", "use_extrinsics", "uniform_power")
    pred = upstream.ac_predictor.vit_ac_predictor(img_size=tuple(hp["img_size"]), **{k: hp[k] for k in keys})
    sd = torch.load(ac / "checkpoint.pt", weights_only=True)["predictor"]
    pred.load_state_dict({k.removeprefix("module.backbone."): v for k, v in sd.items()}, strict=True)
    pred.eval().requires_grad_(False)
    a, s = (torch.from_numpy(np.load(ac / f"{n}.npy")[:, :2]) for n in ("ctx_actions", "ctx_states"))
    with torch.inference_mode():
        out = pred(torch.from_numpy(np.load(ac / "enc_norm.npy")), a, s).numpy()
    gold = np.load(ac / "pred_ctx2.npy")
    assert np.abs(out - gold).max() / np.abs(gold).max() < 1e-5


@pytest.mark.torch
def test_upstream_lewm_planned_the_bench_way_is_the_golden_plan(upstream: Any, lewm_bundle: Path) -> None:
    """stable-worldmodel's LeWM built from the bundle's config.json by the benchmark's build_lewm and
    planned the benchmark's way (CEMSolver on given emb / goal_emb, nothing encoded) gives the golden
    prediction and CEM plan; solver_draws are the solver's recorded draws bit for bit."""
    bw, torch, lw = import_tool("bench.world_models"), upstream.torch, lewm_bundle
    config = json.loads((lw / "config.json").read_text())
    model = bw.build_lewm(upstream, config)
    state = torch.load(lw / "weights.pt", weights_only=True)
    model.load_state_dict({k: v for k, v in state.items() if not k.startswith("encoder.")}, strict=True)
    model.eval().requires_grad_(False)
    emb, goal = np.load(lw / "emb.npy"), np.load(lw / "goal_emb.npy")
    with torch.inference_mode():
        pred = model.predict(torch.from_numpy(emb),
                             model.action_encoder(torch.from_numpy(np.load(lw / "actions.npy")))).numpy()
    gold = np.load(lw / "pred.npy")
    assert np.abs(pred - gold).max() / np.abs(gold).max() < 1e-5

    noise = np.load(lw / "cem_noise.npy")  # [n_steps, 1, samples, horizon, A]
    n_steps, _, samples, horizon, a = noise.shape
    assert np.array_equal(bw.solver_draws(torch, 42, n_steps, samples, horizon, a), noise[:, 0])
    from gymnasium.spaces import Box

    solver = upstream.cem.CEMSolver(model, batch_size=1, num_samples=samples, var_scale=1.0, n_steps=n_steps,
                                    topk=3, device="cpu", seed=42)
    space = Box(-np.inf, np.inf, shape=(1, a // bw.LEWM_ACTION_BLOCK), dtype=np.float32)
    solver.configure(action_space=space, n_envs=1,
                     config=SimpleNamespace(horizon=horizon, action_block=bw.LEWM_ACTION_BLOCK))
    info = {"pixels": torch.zeros(1, 1, 1), "goal": torch.zeros(1, 1, 1),
            "emb": torch.from_numpy(emb[:, :1]), "goal_emb": torch.from_numpy(goal)}
    out = solver.solve(info)
    np.testing.assert_allclose(out["actions"].numpy(), np.load(lw / "cem_actions.npy"), rtol=0, atol=1e-5)
