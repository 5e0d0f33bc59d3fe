"""The world models' planning cells, jepa against the upstream PyTorch code -> tests/results/bench-world.json.

One run times, side by side on the same weights, inputs and thread count (jepa's contexts and
torch.set_num_threads both get --threads), three variants per cell, interleaved (the order rotates
every round): jepa with f32, f16 and bf16 weights (the exact class and the two half-class files), and
upstream's PyTorch code in f32.

- V-JEPA 2-AC at the released dimensions: predictor 24 blocks x 1024, 16 heads, MLP 4096, reading
  ViT-g latents (width 1408), 16 x 16 = 256 patch tokens per frame, action / state 7. The rollouts
  start from latents, so the encoder is not part of a cell (the checkpoint holds a 1-layer
  ViT-g-wide encoder only to be a valid file). Cells: one rollout step at the horizon's longest prefix
  (`Context.world_predict` on K candidates x 2 frames = K x 516 tokens) and one CEM iteration (a 1-iteration
  plan: a full rollout of K samples) at horizons H = 2 and 4, at K = 16 and 64.
  Upstream: Meta's `VisionTransformerPredictorAC` as the cc-vjepa2 package ships it
  (`vjepa2.models.ac_predictor.vit_ac_predictor`, the factory the released model goes through), with
  random weights; its state dict, in the released checkpoint's layout, goes through
  `jepa-convert --family vjepa2_ac` into the f32 / f16 GGUFs jepa runs, so both sides run the same
  weights by construction. Meta's CEM and pose update live in the vjepa2 repository's notebooks, not in
  the package: the CEM cells run jepa.planning's transcription of them (`ac_cem`) around either
  predictor, so they compare the predictors under one planner.
- LeWM at the published dimensions: ViT-tiny encoder (not part of a cell), projectors 192 -> 2048 ->
  192, predictor 6 adaLN-zero blocks, 16 heads x 64, MLP 2048, a 3-frame window, actions 5 x 2. Cells:
  one predict step at K = 300 (the eval's num_samples; [300, 3, 192]) and a full plan with the eval's
  solver config (300 samples, top 30, 30 steps, horizon 5) from a 1-frame history.
  Upstream: stable-worldmodel's LeWM (`stable_worldmodel.wm.lewm`: `LeWM`, `Predictor`, `Embedder`,
  `MLP`) planned by its `CEMSolver` (the solver LeWM's eval config instantiates): upstream code, not a
  transcription. Its state dict plus a random HF-ViT encoder, saved as the published `weights.pt` +
  Hydra `config.json`, goes through `jepa-convert --family lewm`. Both sides plan from given
  embeddings: upstream gets them through the info-dict keys its LeWM caches (`emb`, `goal_emb`), so
  neither side encodes; jepa replays the solver's torch.Generator draws (`noise=`), so both plan on the
  same candidates and their plans compare.

Before any timing the sides are compared (jepa's outputs against upstream's: max |d| / max |upstream|,
recorded per cell): the AC predictor on K = 2 candidates (this call is also every variant's warm-up),
the LeWM cells on their warm-up round; a jepa f32 predictor more than 1e-3 off stops the run. The
timed outputs are compared too. Ratios are upstream / jepa (above 1, jepa is faster): the median over
rounds of the ratio within a round, and the ratio of the medians; the goal for jepa f32 is 1.5, and 2
for the AC CEM iteration at H = 4 (issue 26: upstream recomputes 10 frame blocks there, the cache 4).

Rounds: LeWM cells 1 untimed warm-up round + --rounds timed; AC cells no warm-up round (the agreement
call warmed every variant) + --ac-rounds timed (default 2 at K = 16 and 1 at K = 64: a K = 64 round
of the three variants takes about half an hour on 2 cores, the H = 4 CEM iteration at K = 64 about 15
minutes more). Each cell records its rounds.

    python tools/bench/world.py --threads 2                 # everything as released (~80 min, 2 cores)
    python tools/bench/world.py --quick                     # CPU-sized: see QUICK below
    python tools/bench/world.py --smoke --out /tmp/w.json   # tiny dims, 1 round, every variant (the test)
    python tools/bench/world.py --no-upstream               # jepa only (no torch / peers needed)
    python tools/bench/world.py --cpu x86-64-v3 --ac-layers 4   # both sides held to the AVX2 class
                                                        # -> tests/results/bench-world-avx2.json

`--quick` keeps every width and token count but runs the AC predictor with --ac-layers blocks (default
2 of 24; its cost is close to linear in the depth) and the LeWM plan with fewer steps; the JSON and the
docs say so. The peers are requirements/bench.txt's (torch, cc-vjepa2, stable-worldmodel); their
models are built by bench.world_models."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/world.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench import cpu, harness, peers, world_models

UP = "upstream"
GOAL = 1.5  # upstream / jepa f32, per cell
HALF_GOAL = 3.0  # upstream f32 / jepa bf16, on a CPU with bf16 hardware (issue 26)
CHECK_MAX_REL = 1e-3  # jepa f32 against upstream beyond this: the sides do not run the same model
AC_K = (16, 64)
AC_CEM_GOALS = {2: GOAL, 4: 2.0}  # CEM iteration horizon -> its goal (issue 26)
AC_CHECK_K = 2
LEWM_K = 300
QUICK_AC_LAYERS = 2
QUICK_LEWM_PLAN = dict(num_samples=300, topk=30, n_steps=3, horizon=5)
FULL_AC_ROUNDS = (2, 1)  # timed rounds at K = 16 and 64 for the released depth
Check = Callable[[dict[str, Any]], dict[str, Any]]


# ---- timing ----------------------------------------------------------------------------------------


def time_cell(runs: dict[str, Callable[[], Any]], rounds: int, warmup: int = 1, check: Check | None = None,
              goal: float = GOAL) -> dict[str, Any]:
    """Run the variants interleaved (bench.harness.interleave); the first `warmup` rounds are dropped.
    `check` gets each variant's first output: right after the warm-up rounds (before any timing) when
    there are some, after the timed rounds otherwise; it may raise to stop the run."""
    agreement: list[dict[str, Any]] = []

    def first(outputs: dict[str, Any]) -> None:
        if check is not None:
            agreement.append(check(outputs))

    with harness.Load() as load:
        got = harness.interleave(runs, rounds, warmup, before_timed=first)
    if check is not None and not warmup:
        first(got.outputs)
    samples = {n: [1000 * s for s in v] for n, v in got.samples.items()}
    ms = {n: statistics.median(v) for n, v in samples.items()}
    cell: dict[str, Any] = {"ms": {n: round(v, 2) for n, v in ms.items()}, "rounds": rounds,
                            "warmup_rounds": warmup}
    if UP in runs:
        cell.update(goals(samples, ms, goal))
    if agreement:
        cell["agreement"] = agreement[0]
    load_record = load.record()
    cell.update({"samples_ms": {n: [round(x, 2) for x in v] for n, v in samples.items()},
                 "others_cpu_share": load_record["others_cpu_share"],
                 "load_avg_before_after": load_record["load_avg_before_after"],
                 "seconds": load_record["seconds"]})
    return cell


def goals(samples: dict[str, list[float]], ms: dict[str, float], goal: float) -> dict[str, Any]:
    """Upstream / jepa per variant (paired within rounds, and of the medians), and the goals: f32's, and
    the half class's where the CPU (as masked) computes bf16 in hardware."""
    jepa = [n for n in samples if n != UP]
    out: dict[str, Any] = {
        "ratio_upstream_over": {n: round(harness.paired(samples, [UP], n) or 0.0, 3) for n in jepa},
        "ratio_of_medians": {n: round(ms[UP] / ms[n], 3) for n in jepa},
        "goal": goal,
    }
    out["meets_goal"] = out["ratio_upstream_over"]["f32"] >= goal
    if "bf16" in jepa and cpu.bf16():
        out["half_goal"] = HALF_GOAL
        out["meets_half_goal"] = out["ratio_upstream_over"]["bf16"] >= HALF_GOAL
    return out


def _vs_upstream(outputs: dict[str, Any], key: Callable[[Any], Any] = lambda x: x) -> dict[str, float]:
    return {n: world_models.rel_err(key(o), key(outputs[UP])) for n, o in outputs.items() if n != UP}


def _guard(what: str, errs: dict[str, float]) -> dict[str, float]:
    if errs.get("f32", 0.0) > CHECK_MAX_REL:
        raise SystemExit(f"{what}: jepa f32 is {errs['f32']:.3g} (max |d| / max |upstream|) off upstream, "
                         f"beyond {CHECK_MAX_REL}: the two sides do not run the same model")
    return errs


def _report(name: str, cell: dict[str, Any]) -> None:
    ratio = cell.get("ratio_upstream_over")
    extra = f"  upstream/jepa {ratio}" if ratio else ""
    harness.log(f"[{name}] ms {cell['ms']}{extra}  ({cell['seconds']:.0f} s)")


# ---- V-JEPA 2-AC ---------------------------------------------------------------------------------------


def ac_predictors(paths: dict[str, str], threads: int, upstream: Any) -> tuple[dict[str, Any], Any]:
    """Each variant's predictor call (lat, acts, states) -> latents, and a jepa context's model info."""
    import jepa
    from jepa import world

    ctxs = {ft: jepa.Model(p).context(threads=threads) for ft, p in paths.items()}
    predict: dict[str, Callable[..., np.ndarray]] = {ft: world.predictor(c) for ft, c in ctxs.items()}
    if upstream is not None:
        torch = importlib.import_module("torch")

        def torch_predict(lat: np.ndarray, acts: np.ndarray, states: np.ndarray) -> np.ndarray:
            t = [torch.from_numpy(np.ascontiguousarray(x, np.float32)) for x in (lat, acts, states)]
            with torch.inference_mode():
                return upstream(*t).numpy()

        predict[UP] = torch_predict
    return {"ctxs": ctxs, "predict": predict}, next(iter(ctxs.values())).model.info


def ac_cem_cells(k: int, ctxs: dict[str, Any], predict: dict[str, Any], z: np.ndarray, goal: np.ndarray,
                 state: np.ndarray, rounds: int, seed: int) -> list[dict[str, Any]]:
    """One CEM iteration at K samples per horizon: jepa's planner, and jepa.planning's CEM around the
    upstream predictor (Meta's CEM lives in notebooks, not the package)."""
    from jepa import planning, world

    cells = []
    for h, cem_goal in AC_CEM_GOALS.items():
        opts = dict(samples=k, topk=min(10, k // 2), cem_steps=1, horizon=h, seed=seed)
        plan: dict[str, Callable[[], Any]] = {
            ft: partial(world.plan_latents, c, z, goal, state, **opts) for ft, c in ctxs.items()}
        check = None
        if UP in predict:
            energy = planning.ac_energy_fn(predict[UP], z, state, goal)
            plan[UP] = partial(planning.ac_cem, energy, **opts)
            check = lambda o: {  # noqa: E731
                "plan_actions_max_rel_err": _vs_upstream(o, lambda p: p["actions"]),
                "energy_max_rel_err": _vs_upstream(o, lambda p: p["energy_per_iteration"]),
            }
        cell = {"cell": "ac_cem_iter", "K": k, "H": h,
                **time_cell(plan, rounds, warmup=0, check=check, goal=cem_goal)}
        cells.append(cell)
        _report(f"ac_cem_iter K={k} H={h}", cell)
    return cells


def ac_cells(paths: dict[str, str], threads: int, ac_rounds: tuple[int, int], seed: int,
             upstream: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The AC predictor step and CEM iteration cells at each K, after the sides' agreement check."""
    sides, info = ac_predictors(paths, threads, upstream)
    predict = sides["predict"]
    hw, d = int(info.pred_grid_size) ** 2, int(info.embed_dim)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((hw, d)).astype(np.float32)
    goal = rng.standard_normal((hw, d)).astype(np.float32)
    state = (0.1 * rng.standard_normal(7)).astype(np.float32)

    def inputs(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (rng.standard_normal((k, world_models.AC_H * hw, d)).astype(np.float32),
                (0.05 * rng.standard_normal((k, world_models.AC_H, 7))).astype(np.float32),
                (0.1 * rng.standard_normal((k, world_models.AC_H, 7))).astype(np.float32))

    # The agreement check before any timing, on K = 2; it is every variant's warm-up call too.
    t0 = time.perf_counter()
    check_in = inputs(AC_CHECK_K)
    outs = {n: f(*check_in) for n, f in predict.items()}
    pre: dict[str, Any] = {"K": AC_CHECK_K, "H": world_models.AC_H,
                           "seconds": round(time.perf_counter() - t0, 1)}
    if upstream is not None:
        pre["max_rel_err"] = _guard("AC predictor check", _vs_upstream(outs))
        harness.log(f"[ac check K={AC_CHECK_K}] max rel err vs upstream {pre['max_rel_err']}  "
                    f"({pre['seconds']:.0f} s)")
    cells = []
    for k, rounds in zip(AC_K, ac_rounds, strict=True):
        lat, acts, states = inputs(k)
        step = {n: partial(f, lat, acts, states) for n, f in predict.items()}
        check = None if upstream is None else (lambda o: {"predicted_latents_max_rel_err": _vs_upstream(o)})
        cell = {"cell": "ac_step", "K": k, "H": world_models.AC_H, "tokens": k * world_models.AC_H * (2 + hw),
                **time_cell(step, rounds, warmup=0, check=check)}
        cells.append(cell)
        _report(f"ac_step K={k}", cell)
        cells += ac_cem_cells(k, sides["ctxs"], predict, z, goal, state, rounds, seed)
    return cells, pre


# ---- LeWM ----------------------------------------------------------------------------------------------


def lewm_upstream_runs(upstream: world_models.Upstream, model: Any, embs: np.ndarray, acts: np.ndarray,
                       history: np.ndarray, goal: np.ndarray, plan_cfg: dict[str, int],
                       seed: int) -> dict[str, Any]:
    """Upstream's LeWM predict step and its CEMSolver's plan from given embeddings (the info-dict keys
    its LeWM caches: nothing encoded), the solver's draws for jepa to replay, and the checks."""
    from gymnasium.spaces import Box

    torch = upstream.torch
    te, ta = torch.from_numpy(embs), torch.from_numpy(acts)
    a = acts.shape[-1]

    def step() -> np.ndarray:
        with torch.inference_mode():
            return model.predict(te, model.action_encoder(ta)).numpy()

    s, h = plan_cfg["num_samples"], plan_cfg["horizon"]
    solver = upstream.cem.CEMSolver(model, batch_size=1, num_samples=s, var_scale=1.0,
                                    n_steps=plan_cfg["n_steps"], topk=plan_cfg["topk"], device="cpu",
                                    seed=seed)
    space = Box(-np.inf, np.inf, shape=(1, a // world_models.LEWM_ACTION_BLOCK), dtype=np.float32)
    solver.configure(action_space=space, n_envs=1,
                     config=types.SimpleNamespace(horizon=h, action_block=world_models.LEWM_ACTION_BLOCK))
    # JEPA.rollout reads the history length from pixels' time axis and get_cost needs a goal entry;
    # neither is encoded since emb / goal_emb are given.
    info_dict = {"pixels": torch.zeros(1, 1, 1), "goal": torch.zeros(1, 1, 1),
                 "emb": torch.from_numpy(history[None]), "goal_emb": torch.from_numpy(goal[None, None])}

    def plan() -> dict[str, np.ndarray]:
        solver.torch_gen.manual_seed(seed)  # every solve from the same draws
        with contextlib.redirect_stdout(io.StringIO()):  # solve() prints its time
            out = solver.solve(dict(info_dict))
        return {"actions": out["actions"][0].numpy(), "cost": np.float32(out["costs"][0])}

    def check_plan(o: dict[str, Any]) -> dict[str, Any]:
        return {
            "plan_actions_max_rel_err": _vs_upstream(o, lambda p: p["actions"]),
            "final_elite_cost_rel_err": {
                n: world_models.rel_err(p["cost_per_iteration"][-1], o[UP]["cost"])
                for n, p in o.items() if n != UP},
        }

    noise = world_models.solver_draws(torch, seed, plan_cfg["n_steps"], s, h, a)
    return {"step": step, "plan": plan, "noise": noise,
            "check": lambda o: {"predicted_emb_max_rel_err": _guard("LeWM predict check", _vs_upstream(o))},
            "check_plan": check_plan}


def lewm_cells(paths: dict[str, str], threads: int, rounds: int, seed: int, k: int,
               plan_cfg: dict[str, int], upstream: world_models.Upstream | None = None,
               model: Any = None) -> list[dict[str, Any]]:
    """The LeWM predict step at K and a full plan, jepa's files (and upstream) side by side."""
    import jepa
    from jepa import world

    ctxs = {ft: jepa.Model(p).context(threads=threads) for ft, p in paths.items()}
    info = next(iter(ctxs.values())).model.info
    d, a, window = int(info.wm_embed_dim), int(info.pred_action_dim), int(info.pred_n_frames)
    rng = np.random.default_rng(seed)
    embs = rng.standard_normal((k, window, d)).astype(np.float32)
    acts = rng.standard_normal((k, window, a)).astype(np.float32)
    history = rng.standard_normal((1, d)).astype(np.float32)
    goal = rng.standard_normal(d).astype(np.float32)
    step: dict[str, Callable[[], Any]] = {ft: partial(c.world_predict, embs, acts) for ft, c in ctxs.items()}
    plan_opts: dict[str, Any] = dict(plan_cfg, seed=seed)
    up: dict[str, Any] = {}
    if upstream is not None:
        up = lewm_upstream_runs(upstream, model, embs, acts, history, goal, plan_cfg, seed)
        step[UP] = up["step"]
        plan_opts["noise"] = up["noise"]
    cells = [{"cell": "lewm_step", "K": k, "T": window, **time_cell(step, rounds, check=up.get("check"))}]
    _report(f"lewm_step K={k}", cells[-1])
    plan: dict[str, Callable[[], Any]] = {
        ft: partial(world.plan_latents, c, history, goal, **plan_opts) for ft, c in ctxs.items()}
    if up:
        plan[UP] = up["plan"]
    cells.append({"cell": "lewm_plan", "K": plan_cfg["num_samples"], **plan_cfg,
                  **time_cell(plan, rounds, check=up.get("check_plan"))})
    _report("lewm_plan", cells[-1])
    return cells


# ---- the run -------------------------------------------------------------------------------------------


def upstream_detail(up: world_models.Upstream, threads: int) -> dict[str, Any]:
    v = up.versions
    return {
        "ac": f"cc-vjepa2 {v['cc-vjepa2']} (a PyPI package of Meta's vjepa2 code): "
              "vjepa2.models.ac_predictor.vit_ac_predictor (VisionTransformerPredictorAC) at the released "
              "config, random weights; its checkpoint (Meta's layout) converted by jepa-convert --family "
              "vjepa2_ac into the GGUFs jepa runs. The rollout and CEM around it are jepa.planning's "
              "(Meta's CEM and pose update live in the vjepa2 repository's notebooks, not in the package), "
              "so the CEM cells compare the predictors under one planner.",
        "lewm": f"stable-worldmodel {v['stable-worldmodel']}: LeWM (stable_worldmodel.wm.lewm: LeWM, "
                "Predictor, Embedder, MLP) planned by its CEMSolver: upstream code, not a transcription. "
                "Its weights.pt (+ a random HF ViT encoder, published layout) and config.json converted "
                "by jepa-convert --family lewm. Both sides plan from given embeddings (upstream through "
                "the info-dict keys its LeWM caches, emb and goal_emb; neither encodes); jepa replays "
                "the solver's torch.Generator draws (noise=), so both plan on the same candidates.",
        "torch_threads": up.torch.get_num_threads(),
        "jepa_threads": threads,
        "jepa_context": "Model.context(threads) defaults: max_batch 32 (larger K runs in chunks of 32), "
                        "flash_attn auto",
        "import_shims": up.shims,
        "agreement": "max |jepa - upstream| / max |upstream| per cell; jepa f32 beyond "
                     f"{CHECK_MAX_REL} on a predictor stops the run",
        "ratios": "upstream / jepa: ratio_upstream_over is the median over rounds of the ratio within a "
                  f"round; goal {GOAL} for jepa f32 (meets_goal), {AC_CEM_GOALS[4]} for the AC CEM "
                  "iteration at H = 4",
    }


@dataclass
class Sizes:
    """What one run times: the models' dims, LeWM's plan and K, the AC cells' rounds."""

    ac: dict[str, int]
    lewm: dict[str, int]
    plan: dict[str, int]
    k_lewm: int
    ac_rounds: tuple[int, int]


def sizes(args: Any, rounds: int) -> Sizes:
    if args.smoke:
        ac, lewm, k = dict(world_models.AC_SMOKE), dict(world_models.LEWM_SMOKE), 16
        plan = dict(world_models.SMOKE_LEWM_PLAN)
    else:
        ac, lewm = dict(world_models.AC_FULL), dict(world_models.LEWM_FULL)
        plan, k = dict(QUICK_LEWM_PLAN if args.quick else world_models.LEWM_PLAN), LEWM_K
        ac["n_layer"] = args.ac_layers or (QUICK_AC_LAYERS if args.quick else world_models.AC_FULL["n_layer"])
    ac_rounds = None if args.ac_rounds is None else tuple(args.ac_rounds)
    if ac_rounds is None:
        full_depth = ac["n_layer"] == world_models.AC_FULL["n_layer"] and not args.smoke
        ac_rounds = FULL_AC_ROUNDS if full_depth else (rounds, rounds)
    return Sizes(ac, lewm, plan, k, (int(ac_rounds[0]), int(ac_rounds[1])))


def measure(sz: Sizes, up: world_models.Upstream | None, threads: int, rounds: int, seed: int,
            only: str | None, ftypes: tuple[str, ...]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every cell asked for, on files made here (from the upstream modules, or jepa's random writers)."""
    t0 = time.perf_counter()
    cells: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if only in (None, "ac"):
            ac, pred = world_models.world_files("ac", up, sz.ac, tmp, seed, ftypes)
            harness.log(f"[ac] files ready ({time.perf_counter() - t0:.0f} s)")
            ac_c, checks["ac_predictor"] = ac_cells(ac, threads, sz.ac_rounds, seed, pred)
            cells += ac_c
            del pred
            for p in ac.values():
                Path(p).unlink()
        if only in (None, "lewm"):
            lw, model = world_models.world_files("lewm", up, sz.lewm, tmp, seed, ftypes)
            cells += lewm_cells(lw, threads, rounds, seed, sz.k_lewm, sz.plan, up, model)
    return cells, checks


def reduced(sz: Sizes, smoke: bool, rounds: int, only: str | None) -> list[str]:
    """What a CPU-sized run left out of the released sizes, said in the record and the docs."""
    out = []
    if not smoke and sz.ac["n_layer"] != world_models.AC_FULL["n_layer"]:
        full = world_models.AC_FULL["n_layer"]
        out.append(f"AC predictor {sz.ac['n_layer']} of {full} blocks (--ac-layers)")
    if not smoke and sz.plan != world_models.LEWM_PLAN:
        out.append(f"LeWM plan {sz.plan['num_samples']} samples x {sz.plan['n_steps']} steps "
                   f"(eval: {world_models.LEWM_PLAN['num_samples']} x {world_models.LEWM_PLAN['n_steps']})")
    if not smoke and min(sz.ac_rounds) < rounds and only != "lewm":
        out.append(f"AC cells {sz.ac_rounds[0]} timed round(s) at K = {AC_K[0]} and {sz.ac_rounds[1]} at K = "
                   f"{AC_K[1]} (a K = {AC_K[1]} round of all variants takes tens of minutes here); "
                   f"LeWM cells {rounds}")
    return out


def summary(up: world_models.Upstream | None, threads: int) -> str:
    if up is None:
        return "not measured in this run (--no-upstream)"
    v = up.versions
    return (f"measured side by side (torch {v['torch']}, threads={threads} on both sides): "
            f"V-JEPA 2-AC is cc-vjepa2 {v['cc-vjepa2']}'s VisionTransformerPredictorAC (the CEM "
            f"cells under jepa.planning's CEM), LeWM is stable-worldmodel "
            f"{v['stable-worldmodel']}'s LeWM with its CEMSolver; ratios upstream / jepa (goal "
            f"{GOAL} for f32, {AC_CEM_GOALS[4]} for the AC CEM iteration at H = 4) and agreement per "
            "cell in the JSON")


def config(sz: Sizes, rounds: int, seed: int, up: world_models.Upstream | None) -> dict[str, Any]:
    ac = sz.ac
    return {
        "ac": {**ac, "tokens_per_frame": (ac["img_size"] // ac["patch_size"]) ** 2, "K": list(AC_K),
               "H": world_models.AC_H, "cem_H": list(AC_CEM_GOALS),
               "cem": "samples K, topk min(10, K/2), 1 iteration",
               "rounds": dict(zip(map(str, AC_K), sz.ac_rounds, strict=True)), "warmup_rounds": 0,
               "warmup": f"the agreement call on K = {AC_CHECK_K} (every variant)"},
        "lewm": {**sz.lewm, "K_step": sz.k_lewm, "plan": sz.plan, "history_frames": 1, "rounds": rounds,
                 "warmup_rounds": 1, "action_block": world_models.LEWM_ACTION_BLOCK},
        "weights": (f"random (jepa.testing.random_weights' rule on the upstream modules, seed {seed}), "
                    "converted by jepa-convert" if up
                    else f"random (jepa.testing.random_world), seed {seed}"),
    }


def run(args: Any) -> dict[str, Any]:
    rounds = 1 if args.smoke else args.rounds
    ftypes = tuple(dict.fromkeys(["f32", *args.ftypes]))
    sz = sizes(args, rounds)
    up = None if args.no_upstream else world_models.load_upstream(args.threads)
    rec = harness.Run("bench-world", args.threads, args.smoke, args.quick, versions={} if up is None
                      else up.versions)
    cells, checks = measure(sz, up, args.threads, rounds, args.seed, args.only, ftypes)
    # The half class's goal (and bf16_hardware) follows the CPU as masked (bench.cpu), PyTorch's
    # threads and kernels what it says it runs.
    machine: dict[str, Any] = {"bf16_hardware": cpu.bf16()}
    if up is not None:
        torch = peers.torch_info(up.torch)
        machine.update(torch_cpu_capability=torch["cpu_capability"], torch_threads=torch["threads"],
                       torch_mkldnn=torch["mkldnn"])
    return {
        **rec.head(**machine),
        "reduced": reduced(sz, args.smoke, rounds, args.only),
        "config": config(sz, rounds, args.seed, up),
        "upstream": summary(up, args.threads),
        "upstream_detail": None if up is None else upstream_detail(up, args.threads),
        "checks": checks,
        "cells": cells,
    }


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser(__doc__, smoke="tiny dims, 1 round: checks the script runs",
                        quick=f"CPU-sized: AC predictor {QUICK_AC_LAYERS} blocks, LeWM plan "
                        f"{QUICK_LEWM_PLAN['n_steps']} CEM steps (all widths and token counts as released)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="timed rounds per LeWM cell (after 1 warm-up round)")
    ap.add_argument("--ac-rounds", type=int, nargs=2, default=None, metavar=("R16", "R64"),
                    help=f"timed rounds of the AC cells at K = {AC_K[0]} and {AC_K[1]} (no warm-up round; "
                    f"default {FULL_AC_ROUNDS[0]} {FULL_AC_ROUNDS[1]} at the released depth, else --rounds)")
    ap.add_argument("--ac-layers", type=int, default=None, help="AC predictor blocks (24 released)")
    ap.add_argument("--only", choices=("ac", "lewm"), default=None, help="one model's cells only")
    ap.add_argument("--no-upstream", action="store_true",
                    help="jepa only (no torch, cc-vjepa2 or stable-worldmodel needed)")
    ap.add_argument("--ftypes", nargs="+", choices=world_models.FTYPES, default=list(world_models.FTYPES),
                    help="jepa's weight files (f32 always runs: the goals are set against it)")
    ap.add_argument("--seed", type=int, default=0)
    args = harness.parse(ap, argv)
    data = run(args)
    out = harness.out_path(args, "bench-world")
    harness.write_record(out, data, indent=2)
    print(f"wrote {out} ({data['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
