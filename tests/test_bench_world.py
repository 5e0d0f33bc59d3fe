"""The random world-model writers (jepa.convert.random_world) and tools/bench_world.py --smoke."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import jepa
from jepa.convert.random_world import write_random_ac, write_random_lewm

ROOT = Path(__file__).resolve().parents[1]


def test_random_ac_loads_and_predicts(tmp_path: Path) -> None:
    for ft in ("f32", "f16"):
        m = jepa.Model(write_random_ac(tmp_path / f"ac-{ft}.gguf", embed_dim=64, n_layer=2, n_head=2,
                                       enc_dim=48, enc_heads=1, img_size=32, ftype=ft))
        assert m.world_model == "ac"
        info = m.info
        assert (info["pred_embed_dim"], info["pred_n_layer"], info["embed_dim"]) == (64, 2, 48)
        assert info["pred_action_dim"] == info["pred_state_dim"] == 7
        ctx = m.context(threads=1)
        hw = 4  # (32 / 16)^2
        rng = np.random.default_rng(0)
        lat = rng.standard_normal((2, 2 * hw, 48)).astype(np.float32)
        out = ctx.ac_predict(lat, np.zeros((2, 2, 7), np.float32), np.zeros((2, 2, 7), np.float32))
        assert out.shape == (2, 2 * hw, 48) and np.isfinite(out).all()
        plan = ctx.ac_plan(lat[0, :hw], np.zeros(7, np.float32), lat[1, :hw], samples=8, topk=3, cem_steps=1)
        assert plan["actions"].shape == (2, 7)


def test_random_lewm_loads_and_plans(tmp_path: Path) -> None:
    for ft in ("f32", "f16"):
        path = write_random_lewm(tmp_path / f"lewm-{ft}.gguf", enc_dim=32, enc_layers=1, enc_heads=2,
                                 img_size=28,
                                 embed_dim=32, n_layer=1, n_head=2, head_dim=16, ffn_dim=64, proj_hidden=64,
                                 ftype=ft)
        m = jepa.Model(path)
        assert m.world_model == "lewm"
        assert (m.info["wm_embed_dim"], m.info["pred_action_dim"], m.info["pred_n_frames"]) == (32, 10, 3)
        ctx = m.context(threads=1)
        emb = ctx.lewm_embed(np.zeros((1, 3, 28, 28), np.float32))
        assert emb.shape == (1, 32) and np.isfinite(emb).all()
        pred = ctx.lewm_predict(np.zeros((4, 3, 32), np.float32), np.zeros((4, 3, 10), np.float32))
        assert pred.shape == (4, 3, 32)
        plan = ctx.lewm_plan(emb, emb[0], num_samples=8, topk=3, n_steps=2, horizon=5)
        assert plan["actions"].shape == (5, 10)


def test_bench_world_smoke(tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_world.py"), "--smoke", "--threads", "1",
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    cells = {(c["cell"], c["K"]) for c in data["cells"]}
    assert cells == {("ac_step", 16), ("ac_step", 64), ("ac_cem_iter", 16), ("ac_cem_iter", 64),
                     ("lewm_step", 16), ("lewm_plan", 16)}
    assert all(set(c["ms"]) == {"f32", "f16"} for c in data["cells"])
    assert data["upstream"] == "not available here"
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import render_docs
    finally:
        sys.path.pop(0)
    assert "LeWM plan" in render_docs.render_bench_world(data)
