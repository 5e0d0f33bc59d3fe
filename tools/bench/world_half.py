"""The half class for planning: V-JEPA 2-AC and LeWM plans from f16 and bf16 files against f32 on the
same replayed noise -> tests/results/world-half.json (rendered into docs/world-models.md).

Not a timing: what changes in a plan when the weights are 16-bit. Every case plans with
jepa.world.plan_latents (traced) from the same latents and the same recorded draws (`noise=`), once
per file type:
- the reference bundles (../shared/reference/vjepa2_ac and lewm; see their READMEs): the upstream
  models converted by jepa-convert --ftype f32 / f16 / bf16, planned from upstream's latents with
  upstream's CEM settings and draws (`cem_noise.npy`); the f32 plan picks upstream's elites (recorded);
- released-size random models (jepa.testing.random_world at bench.world_models' widths; V-JEPA 2-AC's
  predictor at --ac-layers of its 24 blocks): AC planned with the planner's defaults (Meta's notebook:
  25 samples, top 10, 2 iterations, H = 2), LeWM with its eval's solver (300 samples, top 30, 30
  steps, horizon 5). The goal is what the f32 model predicts for a drawn target action sequence, so
  the plan has somewhere to go.

Half against f32, two ways:
- lock-step, on the same candidates (f32's, iteration by iteration): the half file's energies (AC) or
  costs (LeWM), max |d| / max |f32| and the median relative error; in how many iterations its top-k
  (the elites, which set the next mean and std) differs from f32's, and by how many members; and the
  f32 gap at the top-k boundary over the half error (above 1, no half error can carry a candidate
  across the boundary; random weights make the candidates' energies close, so the gap is small).
- free-running: the half file's own plan (its elites move its mean and std): the first iteration
  whose elites differ from f32's, the plan's max |d| from f32's, and its quality judged by the f32
  model: the f32 energy / cost of the half plan over that of the f32 plan (1: as good).

Each kernel path runs in its own process (the engine picks its kernels once): the default (on a CPU
with AVX512-BF16 or AMX a bf16 file runs the bf16 kernels, which round the activations to bf16 too)
and JEPA_GEMM=avx2, what an AVX2-only CPU runs (a bf16 file's weights widened exactly and multiplied
in f32: only the weights are rounded). f16 files run that way on every CPU path, so they run once.
f16 on a GPU (f16 activations) is not measured here: no GPU.

    python tools/bench/world_half.py                    # the committed run (AC at its 24 blocks)
    python tools/bench/world_half.py --ac-layers 2      # CPU-sized AC
    python tools/bench/world_half.py --smoke --out /tmp/h.json   # tiny random models + bundles (the test)
    python tools/bench/world_half.py --cpu x86-64-v3    # every path held to the AVX2 class
                                                        # -> tests/results/world-half-avx2.json"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/world_half.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench import cpu, harness
from bench.harness import sig
from bench.world_models import AC_FULL, AC_SMOKE, LEWM_FULL, LEWM_SMOKE, random_files, rel_err

REFERENCE = Path(os.environ.get("JEPA_REFERENCE_DIR", harness.ROOT.parent / "shared" / "reference"))
HALF = ("f16", "bf16")
# JEPA_GEMM value -> the half files run there. f16 weights widen exactly on every CPU path (the same
# bits everywhere), so only bf16 runs again on the AVX2 path.
PATHS: dict[str, tuple[str, ...]] = {"": HALF, "avx2": ("bf16",)}
# The per-sample value and the candidates of each planner's trace.
VALUE = {"ac": "energies", "lewm": "costs"}
CANDIDATES = {"ac": "samples", "lewm": "candidates"}
AC_BUNDLE_KEYS = ("samples", "topk", "cem_steps", "momentum_mean", "momentum_mean_gripper", "momentum_std",
                  "momentum_std_gripper", "maxnorm")
SMOKE_PLAN = {"ac": dict(samples=8, topk=3, cem_steps=2, horizon=2),
              "lewm": dict(num_samples=16, topk=4, n_steps=3, horizon=5)}


@dataclass(frozen=True)
class Case:
    """One model planned once per file type from the same inputs (an .npz: context, goal, noise and,
    for AC, state; a bundle's upstream elites as upstream_topk)."""

    name: str
    kind: str  # "ac" | "lewm"
    title: str
    files: dict[str, str]  # ftype -> GGUF
    inputs: str
    options: dict[str, Any]  # the planner's, without noise
    model: dict[str, Any]


# ---- the cases (this process) ---------------------------------------------------------------------


def _planner_defaults(kind: str, names: tuple[str, ...]) -> dict[str, Any]:
    from jepa.world_kinds import WORLD_KINDS

    return {n: WORLD_KINDS[kind].planner_default(n) for n in names}


def bundle_cases(tmp: Path) -> list[Case]:
    """Both reference bundles, converted at every file type."""
    from jepa.convert import convert

    ac, lw = REFERENCE / "vjepa2_ac", REFERENCE / "lewm"
    hp = json.loads((ac / "hparams.json").read_text())
    mpc = hp["mpc_args"]
    files = {ft: convert(ac / "checkpoint.pt", tmp / f"ac-bundle-{ft}.gguf", family="vjepa2_ac", ftype=ft,
                         img_size=int(hp["img_size"]), head_dim=int(hp["predictor_derived"]["head_dim"]))
             for ft in ("f32", *HALF)}
    np.savez(tmp / "ac-bundle.npz", context=np.load(ac / "z_ctx.npy")[0], goal=np.load(ac / "z_goal.npy")[0],
             state=np.load(ac / "states.npy")[0, 0], noise=np.load(ac / "cem_noise.npy"),
             upstream_topk=np.load(ac / "cem_topk.npy"))
    pred = hp["predictor_args"]
    cases = [Case("ac-bundle", "ac", "V-JEPA 2-AC bundle (Meta's code)", files, str(tmp / "ac-bundle.npz"),
                  {"horizon": mpc["rollout"], **{k: mpc[k] for k in AC_BUNDLE_KEYS}},
                  {"predictor": f"{pred['depth']} x {pred['predictor_embed_dim']}",
                   "tokens_per_frame": hp["tokens_per_frame"]})]
    hp = json.loads((lw / "hparams.json").read_text())
    cem = hp["cem"]
    files = {ft: convert(lw, tmp / f"lewm-bundle-{ft}.gguf", family="lewm", ftype=ft)
             for ft in ("f32", *HALF)}
    emb = np.load(lw / "emb.npy")
    np.savez(tmp / "lewm-bundle.npz", context=emb[0, :1], goal=np.load(lw / "goal_emb.npy")[0, 0],
             noise=np.load(lw / "cem_noise.npy")[:, 0], upstream_topk=np.load(lw / "cem_topk.npy")[:, 0])
    cases.append(Case("lewm-bundle", "lewm", "LeWM bundle (the LeWM code)", files,
                      str(tmp / "lewm-bundle.npz"),
                      {k: cem[k] for k in ("horizon", "num_samples", "topk", "n_steps", "var_scale")},
                      {"embed_dim": int(emb.shape[-1])}))
    return cases


def ac_random_case(tmp: Path, cfg: dict[str, int], options: dict[str, Any], seed: int, threads: int,
                   title: str) -> Case:
    """A random V-JEPA 2-AC at these dims; the goal is the f32 model's last predicted frame for a target
    action sequence drawn like the CEM's first samples."""
    import jepa
    from jepa import planning, world
    from jepa.planning.cem_ac import SAMPLED, ac_candidates

    files = random_files("ac", cfg, tmp, seed, ("f32", *HALF))
    ctx = jepa.Model(files["f32"]).context(threads=threads)
    hw, d, h = (cfg["img_size"] // cfg["patch_size"]) ** 2, cfg["enc_dim"], options["horizon"]
    rng = np.random.default_rng(seed)
    z = planning.normalize_reps(rng.standard_normal((hw, d), dtype=np.float32))
    state = (0.1 * rng.standard_normal(7)).astype(np.float32)
    maxnorm = _planner_defaults("ac", ("maxnorm", "gripper_clamp"))
    std = np.array([maxnorm["maxnorm"]] * 3 + [1.0], np.float32)
    target = ac_candidates(rng.standard_normal((h, 1, SAMPLED), dtype=np.float32),
                           np.zeros((h, SAMPLED), np.float32), np.broadcast_to(std, (h, SAMPLED)),
                           maxnorm["maxnorm"], maxnorm["gripper_clamp"])
    goal = world.rollout_latents(ctx, z, target, state=state, return_latents=True)["latents"][0, -1]
    noise = rng.standard_normal((options["cem_steps"], h, options["samples"], SAMPLED), dtype=np.float32)
    np.savez(tmp / "ac.npz", context=z, goal=goal, state=state, noise=noise)
    return Case("ac-released", "ac", title, files, str(tmp / "ac.npz"), options, dict(cfg))


def lewm_random_case(tmp: Path, cfg: dict[str, int], options: dict[str, Any], seed: int,
                     threads: int, title: str) -> Case:
    """A random LeWM at these dims; the goal is the f32 model's last predicted embedding for a drawn
    target action sequence (a 1-frame history)."""
    import jepa
    from jepa import world

    files = random_files("lewm", cfg, tmp, seed, ("f32", *HALF))
    ctx = jepa.Model(files["f32"]).context(threads=threads)
    d, a, h = cfg["embed_dim"], cfg["action_dim"], options["horizon"]
    rng = np.random.default_rng(seed)
    history = rng.standard_normal((1, d), dtype=np.float32)
    target = rng.standard_normal((1, h, a), dtype=np.float32)
    goal = world.rollout_latents(ctx, history, target, return_latents=True)["latents"][0, -1]
    noise = rng.standard_normal((options["n_steps"], options["num_samples"], h, a), dtype=np.float32)
    np.savez(tmp / "lewm.npz", context=history, goal=goal, noise=noise)
    return Case("lewm-released", "lewm", title, files, str(tmp / "lewm.npz"), options, dict(cfg))


# ---- one kernel path (a worker process) -----------------------------------------------------------


class Planner:
    """One case's inputs on one file: its traced plan and its values on given candidates."""

    def __init__(self, case: Case, ftype: str, threads: int) -> None:
        import jepa

        self.case = case
        self.ctx = jepa.Model(case.files[ftype]).context(threads=threads)
        self.x = dict(np.load(case.inputs))

    def plan(self) -> dict[str, Any]:
        from jepa import world

        x = self.x
        return world.plan_latents(self.ctx, x["context"], x["goal"], x.get("state"), noise=x["noise"],
                                  trace=True, **self.case.options)

    def values(self, candidates: np.ndarray) -> np.ndarray:
        """The planner's per-sample value (AC: the last step's energy; LeWM: the cost) of candidates."""
        from jepa import world

        x = self.x
        out = world.rollout_latents(self.ctx, x["context"], candidates, x["goal"], x.get("state"))
        return np.asarray(out["energies"][:, -1] if self.case.kind == "ac" else out["costs"])


def boundary_gaps(values: np.ndarray, topk: int) -> np.ndarray:
    """Per iteration, the (k + 1)-th smallest value minus the k-th: how far f32's top-k boundary is."""
    s = np.sort(values.astype(np.float64), axis=1)
    return s[:, topk] - s[:, topk - 1] if s.shape[1] > topk else np.full(len(s), np.inf)


def compare(ref: dict[str, Any], half_values: np.ndarray, free: dict[str, Any], topk: int,
            value: str) -> dict[str, Any]:
    """Lock-step (half values on f32's candidates) and free-running (the half plan) against f32's."""
    from jepa.planning.cem_ac import elites

    e32 = np.asarray(ref[value], np.float64)
    d = half_values.astype(np.float64) - e32
    # Candidates a (an elite) and b (not) swap only when d_a - d_b exceeds e_b - e_a >= the boundary
    # gap: so a common offset moves no elite, and gap / (max d - min d) above 1 moves none.
    offset = np.median(d, axis=1, keepdims=True)
    lock = [elites(v, topk) for v in half_values]
    differ = [set(a.tolist()) != set(b.tolist()) for a, b in zip(lock, ref["topk"], strict=True)]
    swapped = [len(set(b.tolist()) - set(a.tolist())) for a, b in zip(lock, ref["topk"], strict=True)]
    order = [not np.array_equal(a, b) for a, b in zip(lock, ref["topk"], strict=True)]
    spread = d.max(axis=1) - d.min(axis=1)
    gaps = boundary_gaps(ref[value], topk)
    margin = [float(g / w) for g, w in zip(gaps, spread, strict=True) if w > 0 and np.isfinite(g)]
    free_differ = [i for i, (a, b) in enumerate(zip(free["topk"], ref["topk"], strict=True))
                   if set(a.tolist()) != set(b.tolist())]
    return {
        "lockstep": {
            "value_max_rel_err": rel_err(half_values, e32),
            "value_median_rel_err": sig(np.median(np.abs(d) / np.abs(e32))),
            # the same after each iteration's median offset: the part that can reorder candidates
            "value_max_rel_err_less_offset": sig(np.abs(d - offset).max() / np.abs(e32).max()),
            # ... over the spread of f32's values (their std over the candidates): error against signal
            "error_over_spread_max": sig((np.abs(d - offset).max(axis=1) / e32.std(axis=1)).max()),
            "iterations": len(e32),
            "elite_sets_differ": int(sum(differ)),
            "elites_swapped": int(sum(swapped)),
            "elite_order_differs": int(sum(order)),
            "topk": topk,
            "gap_over_error_range_min": sig(min(margin)) if margin else None,
            "per_iteration": {"elite_sets_differ": differ, "elites_swapped": swapped,
                              "error_range": [sig(x) for x in spread], "f32_gap": [sig(x) for x in gaps]},
        },
        "free": {
            "first_elites_differ": free_differ[0] if free_differ else None,
            "elite_sets_differ": len(free_differ),
            "actions_identical": bool(np.array_equal(free["actions"].view(np.uint32),
                                                     ref["actions"].view(np.uint32))),
            "actions_max_abs_diff": sig(np.abs(free["actions"] - ref["actions"]).max()),
            "actions_max_rel_err": rel_err(free["actions"], ref["actions"]),
        },
    }


TRACE_KEYS = ("actions", "topk", *VALUE.values(), *CANDIDATES.values())


def reference(case: Case, ref_dir: Path, threads: int) -> tuple[dict[str, Any], Planner, dict[str, Any]]:
    """f32's traced plan: planned here and saved, or read where an earlier path saved it (f32 gives the
    same bits on every CPU path). Also what f32 itself shows: its boundary gaps, its upstream elites."""
    f32 = Planner(case, "f32", threads)
    saved = ref_dir / f"f32-trace-{case.name}.npz"
    if saved.exists():
        return dict(np.load(saved)), f32, {}
    ref = f32.plan()
    np.savez(saved, **{k: ref[k] for k in TRACE_KEYS if k in ref})
    value, topk = VALUE[case.kind], int(case.options["topk"])
    # The lock-step reuses plan energies where the candidates agree: check the two calls give one value.
    first = ref[CANDIDATES[case.kind]][0][:2]
    same_call = np.array_equal(f32.values(first).view(np.uint32), ref[value][0][:2].view(np.uint32))
    gaps = boundary_gaps(ref[value], topk)
    spread = float(np.median(np.abs(ref[value] - np.median(ref[value], axis=1, keepdims=True))))
    info: dict[str, Any] = {
        "value_median": sig(np.median(ref[value]), 4),
        "boundary_gap_min": sig(gaps.min()),
        "boundary_gap_over_spread_min": sig(gaps.min() / spread) if spread else None,
        "rollout_equals_plan_values": bool(same_call),
    }
    if "upstream_topk" in f32.x:
        info["elites_match_upstream"] = bool(np.array_equal(ref["topk"], f32.x["upstream_topk"]))
    return ref, f32, info


def run_path(cases: list[Case], ftypes: tuple[str, ...], ref_dir: Path, threads: int) -> dict[str, Any]:
    """Every case's half files on this process's kernel path against the f32 plan."""
    import jepa

    out: dict[str, Any] = {"kernels": jepa.cpu_kernels(), "engine": harness.engine_fingerprint(), "cases": {}}
    for case in cases:
        t0 = time.perf_counter()
        ref, f32, info = reference(case, ref_dir, threads)
        value, cands = VALUE[case.kind], CANDIDATES[case.kind]
        rows = {}
        for ft in ftypes:
            half = Planner(case, ft, threads)
            free = half.plan()
            # Iterations whose candidates are f32's (all of them until the elites first move) take the
            # plan's own values; the rest are rolled out on f32's candidates.
            lock = np.stack([free[value][i] if np.array_equal(free[cands][i], ref[cands][i])
                             else half.values(ref[cands][i]) for i in range(len(ref[value]))])
            row = compare(ref, lock, free, int(case.options["topk"]), value)
            judged = f32.values(np.stack([ref["actions"], free["actions"]]))
            row["free"]["f32_value_of_plan_ratio"] = sig(judged[1] / judged[0], 6)
            rows[ft] = row
            harness.log(f"[{case.name} {ft} {os.environ.get('JEPA_GEMM') or 'default'}] {row}")
        out["cases"][case.name] = {"f32": info, "half": rows, "seconds": round(time.perf_counter() - t0, 1)}
    return out


def worker(spec: Path) -> int:
    """The --worker entry: a JSON spec in, the path's results next to it."""
    s = json.loads(spec.read_text())
    res = run_path([Case(**c) for c in s["cases"]], tuple(s["ftypes"]), Path(s["ref_dir"]), s["threads"])
    Path(s["out"]).write_text(json.dumps(res))
    return 0


def on_path(cap: str, cases: list[Case], ftypes: tuple[str, ...], tmp: Path, threads: int) -> dict[str, Any]:
    """run_path in a fresh process with JEPA_GEMM=cap (JEPA_CPU_FEATURES and the peers' switches, where
    --cpu set them, inherited)."""
    spec, out = tmp / f"spec-{cap or 'default'}.json", tmp / f"out-{cap or 'default'}.json"
    spec.write_text(json.dumps({"cases": [asdict(c) for c in cases], "ftypes": list(ftypes),
                                "ref_dir": str(tmp), "threads": threads, "out": str(out)}))
    env = {**os.environ, "JEPA_GEMM": cap}
    subprocess.run([sys.executable, __file__, "--worker", str(spec)], env=env, check=True)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


# ---- the run --------------------------------------------------------------------------------------


def run(threads: int, smoke: bool, ac_layers: int, seed: int, bundles: bool) -> dict[str, Any]:
    from kernel_paths import kernels_under  # the engine's kernel-path table: after --cpu is held

    rec = harness.Run("world-half", threads, smoke)
    paths = {"": kernels_under("")}
    for cap in PATHS:
        line = kernels_under(cap)
        if cap and line not in paths.values():  # a cap the CPU lacks repeats the default's line
            paths[cap] = line
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cases = bundle_cases(tmp) if bundles else []
        if smoke:
            ac_cfg, lw_cfg = dict(AC_SMOKE), dict(LEWM_SMOKE)
            ac_opts, lw_opts = SMOKE_PLAN["ac"], SMOKE_PLAN["lewm"]
            titles = ("V-JEPA 2-AC, tiny (random)", "LeWM, tiny (random)")
        else:
            ac_cfg, lw_cfg = {**AC_FULL, "n_layer": ac_layers}, dict(LEWM_FULL)
            ac_opts = _planner_defaults("ac", ("samples", "topk", "cem_steps", "horizon"))
            lw_opts = _planner_defaults("lewm", ("num_samples", "topk", "n_steps", "horizon"))
            titles = (f"V-JEPA 2-AC, released widths, {ac_layers} of {AC_FULL['n_layer']} blocks (random)",
                      "LeWM, published size (random)")
        cases += [ac_random_case(tmp, ac_cfg, ac_opts, seed, threads, titles[0]),
                  lewm_random_case(tmp, lw_cfg, lw_opts, seed, threads, titles[1])]
        results = {cap: on_path(cap, cases, PATHS[cap], tmp, threads) for cap in paths}
    # The paths compare against one f32 trace: a rebuild of the engine between them mixes two builds.
    engines = {res["engine"] for res in results.values()}
    engines |= {rec.versions["engine"], harness.engine_fingerprint()}
    if len(engines) > 1:
        raise SystemExit(f"the engine changed during the run ({', '.join(sorted(engines))}): run it again")
    rows = []
    for case in cases:
        half = [{"ftype": ft, "path": cap or "default", "kernels": res["kernels"], **row}
                for cap, res in results.items() for ft, row in res["cases"][case.name]["half"].items()]
        seconds = {cap or "default": res["cases"][case.name]["seconds"] for cap, res in results.items()}
        rows.append({"case": case.name, "kind": case.kind, "title": case.title, "model": case.model,
                     "plan": case.options, "f32": results[""]["cases"][case.name]["f32"], "half": half,
                     "seconds": seconds})
    return {
        **rec.head(bf16_hardware=cpu.bf16()),
        "paths": {cap or "default": line for cap, line in paths.items()},
        "method": "the same latents and recorded draws (noise=) for every file type; lock-step: the half "
                  "file's values on f32's candidates of each iteration; free: the half file's own plan",
        "not_measured": "f16 on a GPU (f16 activations): no GPU on this machine",
        "cases": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser(__doc__, smoke="tiny random models and small plans (+ the bundles)")
    ap.add_argument("--ac-layers", type=int, default=AC_FULL["n_layer"],
                    help="AC predictor blocks (24 released)")
    ap.add_argument("--no-bundles", action="store_true", help="skip the reference bundles (they need torch)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = harness.parse(ap, argv)
    if args.worker:
        return worker(args.worker)
    out = harness.out_path(args, "world-half")
    data = run(args.threads, args.smoke, args.ac_layers, args.seed, not args.no_bundles)
    harness.write_record(out, data, indent=2)
    print(f"wrote {out} ({data['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
