"""jepa on a GPU against PyTorch on the same GPU -> tests/results/bench-gpu.json.

The GPU half of the engine benchmark (.ci/gpu_check.sh runs it on a lent machine), same weights and
same precision on both sides, rounds interleaved (the order rotates), the first round a warm-up,
medians reported with ratios torch / jepa (above 1 jepa is faster) and jepa's errors against torch f32:

- encoders: ViT-S/16 and ViT-L/16 at batch 1 / 8 / 32 / 128 and the V-JEPA 2 ViT-L video encoder on
  one clip (and 4), the transformers models (random weights, built by bench.vit as the CPU benchmark
  builds them) in PyTorch f32, f16 and bf16 (weights cast, autocast off) against their jepa-convert
  GGUFs in f32, f16 and bf16 through jepa.Model(device=...);
- V-JEPA 2-AC's predictor step at K = 16 / 64 / 256 candidates (H = 2): Meta's predictor
  (cc-vjepa2, built by bench.world_models) in f32 and bf16 against jepa's f32 and bf16 files;
- LeWM's plan (the eval's CEM: 300 samples, top 30, 30 steps, horizon 5): stable-worldmodel's
  CEMSolver on the device against jepa.world.plan_latents on the same candidates (the solver's
  generator draws, replayed).

The cells run in the order of the goals (the encoders at batch 32 and the AC step first) while
--budget-s lasts; a cell that does not fit is listed under "skipped", never half-measured.

    python tools/bench/gpu.py --device cuda:0 --budget-s 240   # on the GPU machine (.ci/gpu_check.sh)
    python tools/bench/gpu.py --device cpu --smoke --out /tmp/x.json   # checks the script runs (CI)

A benchmark, not a test. Needs a CUDA build of jepa (-DJEPA_CUDA=ON) for a cuda device; the world
cells need the peers (requirements/bench.txt; .ci/gpu_check.sh carries them as wheels)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import sys
import tempfile
import time
import types
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/gpu.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench import harness, world_models
from bench.vit import MODELS, SMOKE_MODELS, build_torch, hf_layout, last_hidden

# (kind, name or K, batch): the order is the goals' (issue 24: the encoders at batch 32 and the AC step
# first), then the rest of the table.
FULL_PLAN: list[tuple[str, Any, int]] = [
    ("encoder", "vit-s16", 32),
    ("encoder", "vit-l16", 32),
    ("ac_step", 16, 0),
    ("ac_step", 64, 0),
    ("ac_step", 256, 0),
    ("lewm_plan", "lewm", 0),
    ("encoder", "vjepa2-l16", 1),
    ("encoder", "vit-s16", 1),
    ("encoder", "vit-s16", 8),
    ("encoder", "vit-s16", 128),
    ("encoder", "vit-l16", 1),
    ("encoder", "vit-l16", 8),
    ("encoder", "vit-l16", 128),
    ("encoder", "vjepa2-l16", 4),
]
SMOKE_PLAN: list[tuple[str, Any, int]] = [
    ("encoder", "vit-tiny", 1),
    ("encoder", "vit-tiny", 2),
    ("encoder", "vjepa2-tiny", 1),
    ("ac_step", 4, 0),
    ("lewm_plan", "lewm", 0),
]
AC_GPU_LAYERS = 24  # the released depth
HALF = ("f32", "bf16")  # the world models' files: the exact class and the half class torch autocasts to


# ---- timing ------------------------------------------------------------------------------------------


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


class Budget:
    """The seconds the run may still start cells in."""

    def __init__(self, seconds: float) -> None:
        self.t0, self.seconds = time.perf_counter(), seconds

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.t0)


def timed(runs: dict[str, Callable[[], Any]], rounds: int, slice_s: float, device: str) -> dict[str, Any]:
    """Interleaved rounds (bench.harness.rotated), the first a warm-up, the device synchronised around
    every call (its work is asynchronous); at least 2 timed rounds, then more up to `rounds` while the
    cell's time slice lasts (bench.harness.interleave has no slice, nor drops a variant). Returns the
    rounds (bench.harness.Rounds), their count, the variants dropped and the seconds."""
    order = list(runs)
    outputs: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    t0 = time.perf_counter()
    for k in list(order):  # the warm-up round; a variant that fails here is dropped, and said so
        try:
            _sync(device)
            outputs[k] = runs[k]()
            _sync(device)
        except Exception as exc:
            dropped[k] = f"{type(exc).__name__}: {exc}"[:500]
            order.remove(k)
    samples: dict[str, list[float]] = {k: [] for k in order}
    r = 1
    while r <= rounds:
        for k in harness.rotated(order, r):
            _sync(device)
            s = time.perf_counter()
            runs[k]()
            _sync(device)
            samples[k].append(time.perf_counter() - s)
        r += 1
        if r >= 3 and time.perf_counter() - t0 > slice_s:
            break
    return {"got": harness.Rounds(samples, outputs), "rounds": r - 1, "dropped": dropped,
            "seconds": round(time.perf_counter() - t0, 1)}


def ratios(med: dict[str, float], pairs: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Each pair's (torch, jepa) ratio of the medians, where both ran."""
    return {p: round(med[t] / med[j], 3) for p, (t, j) in pairs.items() if t in med and j in med}


def rel_errors(outputs: dict[str, Any], ref: str,
               key: Callable[[Any], Any] = lambda x: x) -> dict[str, float]:
    """Every other variant's output against `ref`'s (bench.world_models.rel_err)."""
    return {k: world_models.rel_err(key(v), key(outputs[ref])) for k, v in outputs.items() if k != ref}


def _cell_tail(t: dict[str, Any]) -> dict[str, Any]:
    return {"rounds": t["rounds"], "seconds": t["seconds"], "dropped": t["dropped"]}


# ---- encoders ---------------------------------------------------------------------------------------


class Encoders:
    """Each encoder built, converted and loaded once, for all its batch sizes (kept: the cells come in
    the goals' order, not grouped by model, and an H200 holds them all)."""

    def __init__(self, device: str, work: Path, seed: int) -> None:
        self.device, self.work, self.seed = device, work, seed
        self.ready: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        if name in self.ready:
            return self.ready[name]
        import torch

        import jepa
        from jepa.convert import convert

        spec = {**MODELS, **SMOKE_MODELS}[name]
        model = build_torch(spec, self.seed)
        src = self.work / f"{name}-hf"
        model.save_pretrained(src)
        files = {ft: convert(src, self.work / f"{name}-{ft}.gguf", ftype=ft) for ft in world_models.FTYPES}
        wrapped = last_hidden(model, spec.kind).to(self.device)
        torch_models = {
            "f32": wrapped,
            "f16": copy.deepcopy(wrapped).to(dtype=torch.float16),
            "bf16": copy.deepcopy(wrapped).to(dtype=torch.bfloat16),
        }
        models = {ft: jepa.Model(p, device=self.device) for ft, p in files.items()}
        self.ready[name] = (spec, torch_models, models)
        return self.ready[name]


def encoder_cell(enc: Encoders, name: str, batch: int, rounds: int, slice_s: float) -> dict[str, Any]:
    import torch

    spec, torch_models, models = enc.get(name)
    device = enc.device
    x = np.random.default_rng(enc.seed).standard_normal(spec.input_shape(batch)).astype(np.float32)
    xt = torch.from_numpy(hf_layout(spec, x)).to(device)
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

    def torch_run(ft: str) -> Callable[[], np.ndarray]:
        inp = xt.to(dtypes[ft])

        def run() -> np.ndarray:
            with torch.no_grad():
                out = torch_models[ft](inp)
            return out.float().cpu().numpy()

        return run

    runs: dict[str, Callable[[], np.ndarray]] = {f"torch-{ft}": torch_run(ft) for ft in world_models.FTYPES}
    for ft, m in models.items():
        runs[f"jepa-{ft}"] = partial(m.context(max_batch=max(batch, 1)).encode, x)
    t = timed(runs, rounds, slice_s, device)
    med = t["got"].medians(1000 / batch)
    return {
        "cell": "encoder",
        "model": name,
        "batch": batch,
        "ms_per_item": med,
        "ratio_torch_over_jepa": ratios(med, {ft: (f"torch-{ft}", f"jepa-{ft}")
                                              for ft in world_models.FTYPES}),
        "max_rel_error_vs_torch_f32": rel_errors(t["got"].outputs, "torch-f32"),
        **_cell_tail(t),
    }


# ---- world models ----------------------------------------------------------------------------------


class World:
    """The upstream peers and the files, built once (the AC predictor for every K)."""

    def __init__(self, device: str, work: Path, seed: int, smoke: bool, ac_layers: int) -> None:
        self.device, self.work, self.seed, self.smoke = device, work, seed, smoke
        self.ac_layers = ac_layers
        self.up: world_models.Upstream | None = None
        self.ac: Any = None
        self.lewm: Any = None

    def upstream(self) -> world_models.Upstream:
        if self.up is None:
            import torch

            self.up = world_models.load_upstream(torch.get_num_threads())
        return self.up

    def ac_ready(self) -> Any:
        if self.ac is None:
            import jepa

            cfg = dict(world_models.AC_SMOKE if self.smoke else world_models.AC_FULL)
            if not self.smoke:
                cfg["n_layer"] = self.ac_layers
            files, pred = world_models.ac_upstream(self.upstream(), cfg, self.work, self.seed, HALF)
            pred = pred.to(self.device)
            models = {ft: jepa.Model(p, device=self.device) for ft, p in files.items()}
            self.ac = (cfg, pred, models)
        return self.ac

    def lewm_ready(self) -> Any:
        if self.lewm is None:
            import jepa

            cfg = dict(world_models.LEWM_SMOKE if self.smoke else world_models.LEWM_FULL)
            files, model = world_models.lewm_upstream(self.upstream(), cfg, self.work, self.seed, HALF)
            model = model.to(self.device)
            models = {ft: jepa.Model(p, device=self.device) for ft, p in files.items()}
            self.lewm = (cfg, model, models)
        return self.lewm


def ac_step_cell(w: World, k: int, rounds: int, slice_s: float) -> dict[str, Any]:
    import torch

    cfg, pred, models = w.ac_ready()
    info = next(iter(models.values())).info
    hw, d = int(info.pred_grid_size) ** 2, int(info.embed_dim)
    rng = np.random.default_rng(w.seed + k)
    lat = rng.standard_normal((k, world_models.AC_H * hw, d)).astype(np.float32)
    acts = (0.05 * rng.standard_normal((k, world_models.AC_H, 7))).astype(np.float32)
    states = (0.1 * rng.standard_normal((k, world_models.AC_H, 7))).astype(np.float32)
    dev = [torch.from_numpy(a).to(w.device) for a in (lat, acts, states)]

    def torch_run(half: bool) -> Callable[[], np.ndarray]:
        # bf16: the f32 weights under autocast (the predictor's RoPE mixes dtypes with cast weights)
        amp = torch.autocast(w.device.split(":")[0], dtype=torch.bfloat16, enabled=half)

        def run() -> np.ndarray:
            with torch.inference_mode(), amp:
                return pred(*dev).float().cpu().numpy()

        return run

    runs: dict[str, Callable[[], np.ndarray]] = {"torch-f32": torch_run(False), "torch-bf16": torch_run(True)}
    for ft, m in models.items():
        runs[f"jepa-{ft}"] = partial(m.context(max_batch=k).world_predict, lat, acts, states)
    t = timed(runs, rounds, slice_s, w.device)
    med = t["got"].medians(1000)
    return {
        "cell": "ac_step",
        "K": k,
        "H": world_models.AC_H,
        "tokens": k * world_models.AC_H * (2 + hw),
        "predictor_layers": cfg["n_layer"],
        "ms": med,
        "ratio_torch_over_jepa": ratios(med, {ft: (f"torch-{ft}", f"jepa-{ft}") for ft in HALF}),
        "max_rel_error_vs_torch_f32": rel_errors(t["got"].outputs, "torch-f32"),
        **_cell_tail(t),
    }


def lewm_plan_cell(w: World, rounds: int, slice_s: float) -> dict[str, Any]:
    import torch
    from gymnasium.spaces import Box

    from jepa import world

    _cfg, model, models = w.lewm_ready()
    plan_cfg = dict(world_models.SMOKE_LEWM_PLAN if w.smoke else world_models.LEWM_PLAN)
    info = next(iter(models.values())).info
    d, a = int(info.wm_embed_dim), int(info.pred_action_dim)
    rng = np.random.default_rng(w.seed)
    history = rng.standard_normal((1, d)).astype(np.float32)
    goal = rng.standard_normal(d).astype(np.float32)
    s, h, seed = plan_cfg["num_samples"], plan_cfg["horizon"], w.seed
    solver = w.upstream().cem.CEMSolver(model, batch_size=1, num_samples=s, var_scale=1.0,
                                        n_steps=plan_cfg["n_steps"], topk=plan_cfg["topk"], device=w.device,
                                        seed=seed)
    space = Box(-np.inf, np.inf, shape=(1, a // world_models.LEWM_ACTION_BLOCK), dtype=np.float32)
    solver.configure(action_space=space, n_envs=1,
                     config=types.SimpleNamespace(horizon=h, action_block=world_models.LEWM_ACTION_BLOCK))
    info_dict = {
        "pixels": torch.zeros(1, 1, 1),
        "goal": torch.zeros(1, 1, 1),
        "emb": torch.from_numpy(history[None]).to(w.device),
        "goal_emb": torch.from_numpy(goal[None, None]).to(w.device),
    }

    def torch_plan() -> dict[str, np.ndarray]:
        solver.torch_gen.manual_seed(seed)
        with contextlib.redirect_stdout(io.StringIO()):
            out = solver.solve(dict(info_dict))
        return {"actions": out["actions"][0].cpu().numpy(), "cost": np.float32(out["costs"][0])}

    # The solver's draws on the device's generator, in jepa's replay layout [n_steps, S, H, A].
    noise = world_models.solver_draws(torch, seed, plan_cfg["n_steps"], s, h, a, device=w.device)
    runs: dict[str, Callable[[], Any]] = {"upstream-f32": torch_plan}
    for ft, m in models.items():
        runs[f"jepa-{ft}"] = partial(world.plan_latents, m.context(max_batch=s), history, goal, **plan_cfg,
                                     seed=seed, noise=noise)
    t = timed(runs, rounds, slice_s, w.device)
    med = t["got"].medians(1000)
    return {
        "cell": "lewm_plan",
        **plan_cfg,
        "ms": med,
        "ratio_upstream_f32_over": ratios(med, {ft: ("upstream-f32", f"jepa-{ft}") for ft in models}),
        "plan_actions_max_rel_err": rel_errors(t["got"].outputs, "upstream-f32", lambda p: p["actions"]),
        **_cell_tail(t),
    }


# ---- the run ----------------------------------------------------------------------------------------

# What each kind of cell prints as it ends (the record keeps everything).
PRINTED = {"encoder": ("model", "batch", "ms_per_item", "ratio_torch_over_jepa"),
           "ac_step": ("cell", "K", "ms", "ratio_torch_over_jepa"),
           "lewm_plan": ("cell", "ms", "ratio_upstream_f32_over")}


def plan_of(args: Any) -> list[tuple[str, Any, int]]:
    """The cells to run, in order: --smoke's tiny ones or the full table, cut to --only."""
    plan = SMOKE_PLAN if args.smoke else FULL_PLAN
    if args.only == "vit":
        return [c for c in plan if c[0] == "encoder" and str(c[1]).startswith("vit")]
    if args.only == "encoders":
        return [c for c in plan if c[0] == "encoder"]
    if args.only == "world":
        return [c for c in plan if c[0] != "encoder"]
    return plan


def options() -> Any:
    p = harness.parser(__doc__, smoke="tiny models, 2 rounds (runs on the CPU too)", threads=None)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--rounds", type=int, default=10, help="timed rounds per cell at most")
    p.add_argument("--budget-s", type=float, default=600.0,
                   help="stop starting cells after this many seconds")
    p.add_argument("--only", choices=("vit", "encoders", "world"), default=None,
                   help="vit: the ViT cells alone; encoders: every encoder cell; "
                   "world: the AC and LeWM cells")
    p.add_argument("--ac-layers", type=int, default=AC_GPU_LAYERS, help="AC predictor depth (released: 24)")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: list[str] | None = None) -> int:
    a = harness.parse(options(), argv)
    import torch

    budget = Budget(a.budget_s)
    plan = plan_of(a)
    rounds = 2 if a.smoke else a.rounds
    gpu = torch.cuda.get_device_name(0) if a.device.startswith("cuda") and torch.cuda.is_available() else None
    rec = harness.Run("bench-gpu", torch.get_num_threads(), a.smoke, modules=("torch",),
                      versions={"cuda": torch.version.cuda})
    cells: list[dict[str, Any]] = []
    world_cells: list[dict[str, Any]] = []
    skipped: list[str] = []
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        enc = Encoders(a.device, Path(tmp), a.seed)
        w = World(a.device, Path(tmp), a.seed, a.smoke, a.ac_layers)
        for i, (kind, what, batch) in enumerate(plan):
            label = f"{kind} {what}" + (f" b{batch}" if batch else "")
            left = budget.left()
            if left < (1 if a.smoke else 15):
                skipped.append(label)
                continue
            slice_s = max(3.0, 0.5 * left / max(1, len(plan) - i))
            try:
                if kind == "encoder":
                    c = encoder_cell(enc, what, batch, rounds, slice_s)
                elif kind == "ac_step":
                    c = ac_step_cell(w, what, rounds, slice_s)
                else:
                    c = lewm_plan_cell(w, rounds, slice_s)
                (cells if kind == "encoder" else world_cells).append(c)
                print(json.dumps({k: c[k] for k in PRINTED[kind]}), flush=True)
            except Exception as exc:  # a cell that fails is reported; the next one still runs
                errors[label] = f"{type(exc).__name__}: {exc}"[:2000]
                harness.log(f"[{label}] failed: {errors[label]}")
    data = {
        **rec.head(),
        "device": a.device,
        "gpu": gpu,
        "date": rec.started[:10],
        "budget_s": a.budget_s,
        "budget_exhausted": bool(skipped),
        "skipped": skipped,
        "errors": errors,
        "ac_predictor_layers": a.ac_layers,
        "cells": cells,
        "world_cells": world_cells,
    }
    out = harness.out_path(a, "bench-gpu")
    harness.write_record(out, data)
    print(f"wrote {out}" + (f"; skipped (budget): {', '.join(skipped)}" if skipped else "")
          + (f"; failed: {', '.join(errors)}" if errors else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
