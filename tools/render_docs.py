#!/usr/bin/env python3
"""Render the generated blocks of docs/*.md from tests/results/*.json, and docs/gguf.md's schema tables
from the declaration in python/jepa/gguf (keys.py, tensors.py).

A doc marks a generated block with

    <!-- BEGIN GENERATED: bench-engine -->
    ...
    <!-- END GENERATED: bench-engine -->

and the text between the markers is replaced by the renderer of that name, fed with
tests/results/<name>.json (`gguf-keys` and `gguf-tensors` read the declaration instead). Everything
outside the markers is prose and left alone.

    python tools/render_docs.py           # rewrite the docs
    python tools/render_docs.py --check   # exit 1 when a doc is stale (tests/test_docs_current.py)"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = ROOT / "tests" / "results"

BLOCK = re.compile(
    r"(?P<begin><!-- BEGIN GENERATED: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)"
    r"(?P<end><!-- END GENERATED: (?P=name) -->)",
    re.DOTALL,
)

VARIANT_LABELS = {
    "jepa-f32": "jepa f32",
    "jepa-f32-flash": "jepa f32 + flash",
    "jepa-f16": "jepa f16",
    "jepa-f16-flash": "jepa f16 + flash",
    "torch": "PyTorch",
}
MODEL_LABELS = {"vit-s16": "ViT-S/16", "vit-l16": "ViT-L/16"}
# The build every benchmark here runs unless its JSON says otherwise (`make install`: -march=native).
NATIVE_BUILD = "the native build (JEPA_NATIVE=ON)"


def _table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    out = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|",
    ]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _ms(v: float) -> str:
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def _ratio(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"


def _others(cell: dict[str, Any]) -> str:
    """How busy the rest of the machine was during the cell."""
    share = cell.get("others_cpu_share")
    if share is not None:
        return f"{100 * share:.0f}%"
    lo, hi = sorted(cell["load_avg_before_after"])
    return f"load {lo:.1f}–{hi:.1f}"


def render_bench_engine(data: dict[str, Any]) -> str:
    """bench-engine.json: schema 2 (jepa against ONNX Runtime, OpenVINO and PyTorch) or the first
    shape (jepa against PyTorch only, no "schema" key)."""
    if data.get("schema", 1) >= 2:
        return render_bench_engine_peers(data)
    return render_bench_engine_v1(data)


ENGINE_VARIANTS = {  # schema 2: column order and labels
    "torch-f32": "PyTorch f32",
    "ort-f32": "ORT f32",
    "ov-f32": "OpenVINO f32",
    "jepa-f32": "jepa f32",
    "ov-bf16": "OpenVINO bf16",
    "jepa-bf16": "jepa bf16",
    "jepa-f16": "jepa f16",
    "jepa-q8_0": "jepa q8_0",
    "jepa-q4_k": "jepa q4_k",
    "jepa-i8c": "jepa i8c",
    "ort-int8": "ORT int8",
    "ov-int8w": "OpenVINO int8 weights",
    "ov-int8": "OpenVINO int8",
}
ENGINE_RATIOS = {
    "f32_vs_exact_peer": "jepa f32 vs faster of ORT / OpenVINO f32",
    "bf16_vs_ov_bf16": "jepa bf16 vs OpenVINO bf16",
    "f16_vs_ov_bf16": "jepa f16 vs OpenVINO bf16",
    "f32_vs_torch": "jepa f32 vs PyTorch",
    "bf16_vs_torch": "jepa bf16 vs PyTorch",
    "f16_vs_torch": "jepa f16 vs PyTorch",
    "q8_0_vs_jepa_f32": "jepa q8_0 vs jepa f32",
    "q8_0_vs_int8_peer": "jepa q8_0 vs faster of ORT / OpenVINO int8",
    "q4_k_vs_jepa_f32": "jepa q4_k vs jepa f32 (no goal)",
    "i8c_vs_jepa_f32": "jepa i8c vs jepa f32",
    "i8c_vs_int8_peer": "jepa i8c vs faster of ORT / OpenVINO int8",
}
PEER_SHORT = {"ort-f32": "ORT", "ov-f32": "OV", "ort-int8": "ORT", "ov-int8w": "OV-w", "ov-int8": "OV"}
PEAK_LABELS = {"openblas-f32": "OpenBLAS", "mlas-f32": "MLAS", "mkl-f32": "MKL"}


def _one_minus(cos: float) -> str:
    gap = 1.0 - cos
    return "1" if gap <= 0 else f"1 − {gap:.1e}"


def _yes_no(vals: list[bool | None]) -> str:
    seen = [v for v in vals if v is not None]
    if not seen:
        return "–"
    return "yes" if all(seen) else f"**no** ({sum(not v for v in seen)} of {len(seen)} cells)"


ISA_HELD = {"jepa": "jepa", "openvino": "OpenVINO", "torch": "PyTorch", "openblas_peak": "the OpenBLAS peak",
            "onnxruntime": "ONNX Runtime"}


def isa_lines(data: dict[str, Any]) -> list[str]:
    """What a `--isa avx2` run held each engine to (the run's isa block), as a paragraph."""
    isa = data.get("isa", {})
    if isa.get("cap") != "avx2":
        return []
    held = "; ".join(f"{ISA_HELD[k]}: {isa[k]}" for k in ISA_HELD if k in isa)
    return [f"**Held to AVX2** (`--isa avx2`, on a CPU that has more) — {held}.", ""]


HELD = {"jepa": "jepa", "peers": "the peers' switches", "onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}


def held_lines(data: dict[str, Any]) -> list[str]:
    """What a run stood for, as a paragraph: an `--isa avx2` run's isa block (the records before
    JEPA_CPU_FEATURES), or the CPU class a masked run held each engine to (its held block)."""
    old = isa_lines(data)
    mask = data.get("machine", {}).get("cpu_mask")
    if old or not mask:
        return old
    held = data.get("held", {})
    what = "; ".join(f"{HELD[k]}: {held[k]}" for k in HELD if k in held)
    return [f"**Held to {mask}** (`JEPA_CPU_FEATURES={mask}`, on a CPU that has more) — {what}.", ""]


def render_bench_engine_peers(data: dict[str, Any], source: str = "bench-engine") -> str:
    m, v, pk = data["machine"], data["versions"], data["peaks"]
    cells, models = data["cells"], data.get("models", {})
    variants = [k for k in ENGINE_VARIANTS if any(k in c["ms_per_img"] for c in cells)]
    kind = " — a `--smoke` run (tiny models)." if data.get("smoke") else (
        " — a `--quick` smoke run." if data.get("quick") else ".")

    def label(name: str) -> str:
        return models.get(name, {}).get("spec", {}).get("label", MODEL_LABELS.get(name, name))

    # The kernels each engine ran, where it says.
    first = next(iter(models.values()), {})
    jk = next(iter(first.get("jepa_kernels", {}).values()), {})
    ovk = {}
    for prec, info in first.get("ov_kernels", {}).items():
        fc = {k: n for k, n in info["primitives"].items() if k.startswith(("FullyConnected", "MatMul"))}
        ovk[prec] = ", ".join(k.split(": ", 1)[1] for k in sorted(fc, key=lambda k: -fc[k])) or "?"
    run0 = pk["runs"][0]
    blas = run0.get("openblas-f32", {}).get("openblas", {}).get("corename", "?")
    onednn = ", ".join(run0.get("onednn-bf16", {}).get("onednn_impl", [])) or "?"
    f32_by = {PEAK_LABELS[k]: max(r[k].get("gflops", 0.0) for r in pk["runs"]) for k in PEAK_LABELS
              if all(k in r for r in pk["runs"])}
    lines = [
        f"Measured {data['started'][:10]} at commit `{data.get('commit', '?')}` on {m['cpu']} "
        f"({m['cores']} cores; {', '.join(m['simd'])}), {data.get('build', NATIVE_BUILD)}, "
        f"{_threads(m['threads'])} for every engine; jepa "
        f"{v['jepa']} on ggml {v['ggml']}, PyTorch {v['torch']}, transformers {v['transformers']}, "
        f"ONNX Runtime {v['onnxruntime']}, OpenVINO {v['openvino'].split('-')[0]}. Random weights" + kind,
        "",
        f"GEMM peaks at {_threads(pk['threads'])} ({pk['n']}³, the best of the measurements before and after "
        f"the cells): **f32 {_gf(pk['f32_gflops'])} GFLOP/s** ("
        + ", ".join(f"{k} {g:.0f}" for k, g in f32_by.items())
        + f"; OpenBLAS core {blas}), "
        + (f"**bf16 {_gf(pk['bf16_gflops'])} GFLOP/s** (oneDNN `{onednn}`). " if pk["bf16_gflops"] else
           "bf16 peak not measured (no bf16 hardware in use: torch's bf16 product would be emulated). ")
        +
        f"Weight-matrix kernels: jepa `{jk.get('matmul', 'not reported')}`"
        + ("; OpenVINO " + "; ".join(f"{p.split('-')[1]} `{k}`" for p, k in ovk.items()) if ovk else "")
        + f"; PyTorch {data.get('kernels', {}).get('torch', {}).get('cpu_capability', '?')} (MKL f32).",
        "",
    ]
    lines += held_lines(data)
    lines += [
        "Milliseconds per item (an image, or one clip for the video encoder): the median of the "
        "interleaved rounds. *Other load*: the share of the machine's cores that other processes used "
        "while the cell ran.",
        "",
    ]
    rows = [[label(c["model"]), str(c["batch"])]
            + [_ms(c["ms_per_img"][k]) if k in c["ms_per_img"] else "–" for k in variants] + [_others(c)]
            for c in cells]
    lines += _table(["model", "batch"] + [ENGINE_VARIANTS[k] for k in variants] + ["other load"], rows,
                    "lr" + "r" * len(variants) + "r")
    torch_goals = data.get("ratios", {}).get("f32_vs_torch", {}).get("goal", {})
    goal_text = ", ".join(f"{g}× at batch {b}" for b, g in torch_goals.items()) if isinstance(
        torch_goals, dict) else ""
    lines += [
        "",
        "Ratios peer / jepa (above 1, jepa is faster): the median over rounds of the ratio within a round; "
        "against two peers, the faster of the two in each round (its name in brackets: the faster by "
        "median). Goals: at least 1× against the peers of the same precision class"
        + (f", against PyTorch {goal_text}" if goal_text else "")
        + "; a ratio under its goal is **bold**.",
        "",
    ]
    keys = [k for k in ENGINE_RATIOS if any(c["ratios"].get(k) is not None for c in cells)]
    rows = []
    for c in cells:
        row = [label(c["model"]), str(c["batch"])]
        for k in keys:
            val, goal = c["ratios"].get(k), c.get("goals", {}).get(k)
            txt = _ratio(val)
            if val is not None and goal is not None and val < goal:
                txt = f"**{txt}**"
            if k == "f32_vs_exact_peer" and c.get("faster_exact_peer"):
                txt += f" ({PEER_SHORT.get(c['faster_exact_peer'], c['faster_exact_peer'])})"
            row.append(txt)
        rows.append(row)
    lines += _table(["model", "batch"] + [ENGINE_RATIOS[k] for k in keys], rows, "lr" + "r" * len(keys))
    lines += [
        "",
        f"GFLOP/s (the model's FLOPs counted analytically, per item: {_flops_text(models)}) and the share of "
        f"the class's GEMM peak: exact against f32 {_gf(pk['f32_gflops'])}"
        + (f", half against bf16 {_gf(pk['bf16_gflops'])} GFLOP/s." if pk["bf16_gflops"] else " GFLOP/s."),
        "",
    ]
    rows = []
    for c in cells:
        row = [label(c["model"]), str(c["batch"])]
        for k in variants:
            g, sh = c["gflops"].get(k), c["peak_share"].get(k)
            row.append("–" if g is None else f"{g:.0f}" + ("" if sh is None else f" ({100 * sh:.0f}%)"))
        rows.append(row)
    lines += _table(["model", "batch"] + [ENGINE_VARIANTS[k] for k in variants], rows,
                    "lr" + "r" * len(variants))
    lines += [
        "",
        "Against PyTorch f32, worst over all cells: max |Δ| / max |ref| of the tokens and the cosine of "
        "the pooled (mean over patch tokens) vectors; for jepa also whether every batched item equals the "
        "same item alone bit for bit (first, middle and last item, every batch > 1) and whether 1 and 2 "
        "threads give the same bits.",
        "",
    ]
    rows = []
    classes = {k: val["class"] for k, val in data.get("variants", {}).items()}
    for k in variants:
        if k == "torch-f32":
            continue
        rel = [c["max_rel_diff_vs_torch"][k] for c in cells if k in c.get("max_rel_diff_vs_torch", {})]
        cos = [c["pooled_cos_vs_torch"][k] for c in cells if k in c.get("pooled_cos_vs_torch", {})]
        rows.append([
            ENGINE_VARIANTS[k], classes.get(k, "?"),
            f"{max(rel):.1e}" if rel else "–",
            _one_minus(min(cos)) if cos else "–",
            _yes_no([c["batch_bit_identical"].get(k) for c in cells]) if k.startswith("jepa") else "–",
            _yes_no([c["threads_1_2_bit_identical"].get(k) for c in cells]) if k.startswith("jepa") else "–",
        ])
    lines += _table(["variant", "class", "max \\|Δ\\| / max \\|ref\\|", "pooled cosine", "batch = single",
                     "threads 1 = 2"], rows, "llrrll")
    exports = {n: info.get("export", {}) for n, info in models.items()}
    used = sorted({e.get("exporter") or "failed" for e in exports.values()})
    failed = [f"{label(n)}: " + "; ".join(f"{x} — {err[:200]}" for x, err in e.get("attempts", {}).items()
                                          if err != "ok")
              for n, e in exports.items() if any(err != "ok" for err in e.get("attempts", {}).values())]
    if any(v.startswith(("ort", "ov")) for v in variants):
        lines += [
            "",
            f"ONNX peers run the transformers model exported once per model by `torch.onnx.export` "
            f"({', '.join(used)} exporter, opset {next(iter(exports.values()), {}).get('opset', '?')}, f32, "
            "dynamic batch)" + (". Export failures: " + " | ".join(failed) if failed else "") + ".",
        ]
    lines += [
        "",
        f"Source: `tests/results/{source}.json` ({data['seconds'] / 60:.0f} min run; per-round samples, "
        "the peaks' details, the CPU's full flag list and the kernels each engine reported are in the file).",
    ]
    return "\n".join(lines) + "\n"


def _gf(v: float | None) -> str:
    return "not measured" if v is None else f"{v:.0f}"


def _threads(n: int) -> str:
    return f"{n} thread" + ("" if n == 1 else "s")


def _flops_text(models: dict[str, Any]) -> str:
    parts = [f"{info['spec']['label']} {info['gflop_per_item']:.3g} GFLOP" for info in models.values()
             if "spec" in info]
    return ", ".join(parts) or "see the file"


def render_bench_engine_v1(data: dict[str, Any]) -> str:
    m, v = data["machine"], data["versions"]
    lines = [
        "_A run of the first version of the benchmark: jepa against PyTorch alone, before the ONNX "
        "Runtime and OpenVINO columns, the bf16 files and the V-JEPA 2 video cell. Its *+ flash* columns "
        "are today's default path, the others `flash_attn=False`._",
        "",
        f"Measured {data['started'][:10]} on {m['cpu']} ({m['cores']} cores, {', '.join(m['simd'])}), "
        f"{m['threads']} threads for both engines; jepa {v['jepa']} on ggml {v['ggml']}, "
        f"torch {v['torch']}, transformers {v['transformers']}. "
        f"Image {data['image_size']}×{data['image_size']}, random weights"
        + (" — a `--quick` smoke run." if data.get("quick") else "."),
        "",
        "Milliseconds per image (median of the interleaved rounds), and torch / jepa (median of the "
        "per-round ratios; above 1, jepa is faster) for the fastest jepa variant that is batch "
        "bit-identical. *Other load*: the share of the machine's cores that other processes used "
        "while the cell ran.",
        "",
    ]
    summary = {(s["model"], s["batch"]): s for s in data["summary"]}
    rows = []
    for c in data["cells"]:
        s = summary[(c["model"], c["batch"])]
        ms = c["ms_per_img"]
        met = "–" if s["meets_goal"] is None else ("yes" if s["meets_goal"] else "**no**")
        rows.append(
            [
                MODEL_LABELS.get(c["model"], c["model"]),
                str(c["batch"]),
                _ms(ms["torch"]),
                _ms(ms["jepa-f32"]),
                _ms(ms["jepa-f16"]),
                VARIANT_LABELS.get(s["best_bit_identical"] or "", "–"),
                _ratio(s["ratio"]),
                _ratio(s["goal"]),
                met,
                _others(c),
            ]
        )
    lines += _table(
        [
            "model",
            "batch",
            "PyTorch",
            "jepa f32",
            "jepa f16",
            "fastest bit-identical jepa",
            "torch / jepa",
            "goal",
            "met",
            "other load",
        ],
        rows,
        "lrrrrlrrlr",
    )
    lines += [
        "",
        "Flash attention (`model.context(flash_attn=True)`) against the plain path, ms per image; the "
        "speed-up is the median of the per-round ratios:",
        "",
    ]
    rows = []
    for c in data["cells"]:
        s = summary[(c["model"], c["batch"])]
        ms = c["ms_per_img"]
        rows.append(
            [
                MODEL_LABELS.get(c["model"], c["model"]),
                str(c["batch"]),
                _ms(ms["jepa-f32"]),
                _ms(ms["jepa-f32-flash"]),
                f"{s['flash_speedup_f32']:.2f}×",
                _ms(ms["jepa-f16"]),
                _ms(ms["jepa-f16-flash"]),
                f"{s['flash_speedup_f16']:.2f}×",
            ]
        )
    lines += _table(
        [
            "model",
            "batch",
            "f32 plain",
            "f32 flash",
            "flash speed-up",
            "f16 plain",
            "f16 flash",
            "flash speed-up",
        ],
        rows,
        "lrrrrrrr",
    )
    ident: dict[str, bool] = {}
    for c in data["cells"]:
        for k, val in c["batch_bit_identical"].items():
            if val is not None:
                ident[k] = ident.get(k, True) and bool(val)
    worst = {
        k: max(c["max_rel_diff_vs_torch"][k] for c in data["cells"])
        for k in data["cells"][0]["max_rel_diff_vs_torch"]
    }
    same = [VARIANT_LABELS[k] for k, ok in ident.items() if ok]
    differ = [VARIANT_LABELS[k] for k, ok in ident.items() if not ok]
    lines += [
        "",
        "Batch bit-identity (first, middle and last item of each batched call against the same item "
        "alone, every batch > 1): "
        f"identical for {', '.join(same) or 'none'}"
        + (f"; **differs** for {', '.join(differ)}." if differ else "."),
        "Largest max |Δ| / max |ref| of the tokens against PyTorch's, over all cells: "
        + ", ".join(f"{VARIANT_LABELS[k]} {v:.1e}" for k, v in worst.items())
        + ".",
        "",
        f"Source: `tests/results/bench-engine.json` ({data['seconds'] / 60:.0f} min run; per-round samples "
        "and the load average around each cell are in the file).",
    ]
    return "\n".join(lines) + "\n"


WORLD_CELLS = {
    "ac_step": "V-JEPA 2-AC rollout step (`world_predict`, K = {K}, {H} frames)",
    "ac_cem_iter": "V-JEPA 2-AC CEM iteration (`plan_latents`, K = {K} samples, H = {H})",
    "lewm_step": "LeWM predict step (`world_predict`, K = {K}, a {T}-step window)",
    "lewm_plan": "LeWM plan (`plan_latents`, {num_samples} samples × {n_steps} steps, horizon {horizon})",
}


def render_bench_world(data: dict[str, Any], source: str = "bench-world") -> str:
    m, v, cfg = data["machine"], data["versions"], data["config"]
    ac = cfg["ac"]
    kind = " — a `--smoke` run (tiny dims)." if data.get("smoke") else (
        " — a `--quick` run." if data.get("quick") else ".")
    lines = [
        f"Measured {data['started'][:10]} at commit `{data.get('commit', '?')}` on {m['cpu']} ({m['cores']} "
        f"cores, {', '.join(m['simd'])}), {data.get('build', NATIVE_BUILD)}, "
        f"{m['threads']} threads; jepa {v['jepa']} on ggml {v['ggml']}. Random weights; V-JEPA 2-AC "
        f"predictor {ac['n_layer']} blocks × {ac['embed_dim']} ({ac['n_head']} heads, MLP {ac['ffn_dim']}) "
        f"on {ac['enc_dim']}-wide latents, {ac['tokens_per_frame']} patch tokens per frame" + kind,
        "",
    ]
    if "kernels" in m:
        avx2, mask = data.get("isa") == "avx2", m.get("cpu_mask")
        held = (" Both sides held to AVX2 (`--isa avx2`: JEPA_GEMM=avx2 for jepa; ATen, MKL and oneDNN "
                "capped for PyTorch), the stand-in for an AVX2-only CPU." if avx2 else
                f" Both sides held to the {mask} class (`JEPA_CPU_FEATURES={mask}`: jepa's kernels for it; "
                "PyTorch's ATen and MKL switches set to it), the stand-in for such a CPU." if mask else "")
        lines[0] += f" jepa's kernels: {m['kernels']}; PyTorch {m.get('torch_cpu_capability', '?')}." + held
    if data.get("reduced"):
        lines += ["**Reduced for this CPU:** " + "; ".join(data["reduced"]) + ". Widths and token counts "
                  "are the released ones."]
        if ac["n_layer"] < 24:
            lines[-1] += (" The AC cells' time is close to linear in the predictor's depth, so the released "
                          f"24 blocks take up to about {24 / ac['n_layer']:.0f}× the AC times below "
                          "(not measured).")
        lines.append("")
    lines += ["Milliseconds per call: the median of the interleaved rounds, and the best round (less "
              "sensitive to bursts of load on a shared machine). *Other load*: the share of the machine's "
              "cores that other processes used while the cell ran.", ""]
    rows = []
    upstream = any("upstream" in c["ms"] for c in data["cells"])
    # Older records hold f32 and f16 only; the half-class (bf16) columns appear where the run had them.
    fts = [ft for ft in ("f32", "f16", "bf16") if all(ft in c["ms"] for c in data["cells"])]
    for c in data["cells"]:
        what = WORLD_CELLS.get(c["cell"], c["cell"]).format(**c)
        ms = c["ms"]
        row = [what, *(_ms(ms[ft]) for ft in fts), _ms(min(c["samples_ms"]["f32"]))]
        if upstream:
            # Upstream / jepa: above 1 jepa is faster; a ratio under its goal (f32: the exact class's,
            # bf16: the half class's where this CPU has bf16 hardware) in bold.
            r = c.get("ratio_upstream_over", {})
            goals = {"f32": c.get("goal", 1.5), "bf16": c.get("half_goal")}
            row.append(_ms(ms["upstream"]) if "upstream" in ms else "–")
            for ft in fts:
                x, goal = r.get(ft), goals.get(ft)
                row.append("–" if x is None else f"**{x:.2f}×**" if goal and x < goal else f"{x:.2f}×")
        rows.append([*row, str(c["rounds"]), _others(c)])
    header = ["cell", *(f"{ft} ms" for ft in fts), "f32 best"]
    if upstream:
        header += ["upstream ms", *(f"upstream / jepa {ft}" for ft in fts)]
    header += ["rounds", "other load"]
    lines += _table(header, rows, "l" + "r" * (len(header) - 1))
    if any("half_goal" in c for c in data["cells"]):
        half_goal = data["cells"][0]["half_goal"]
        lines += ["", f"Goals: upstream / jepa f32 ≥ {data['cells'][0].get('goal', 1.5)} (2 for the AC CEM "
                  f"iteration at H = 4), upstream f32 / jepa bf16 ≥ {half_goal} (this CPU runs bf16 on its "
                  "own instructions); a ratio under its goal is in bold."]
    elif upstream:
        lines += ["", "Goal: upstream / jepa f32 ≥ 1.5 (2 for the AC CEM iteration at H = 4); a ratio under "
                  "it is in bold."]
        if "bf16" in fts:
            lines[-1] += " No half-class goal here: the bf16 files ran without bf16 instructions."
    lines += [
        "",
        f"Upstream PyTorch: {data['upstream']}.",
        "",
        f"Source: `tests/results/{source}.json` ({data['seconds'] / 60:.0f} min run; per-round samples "
        "and the load average around each cell are in the file).",
    ]
    return "\n".join(lines) + "\n"


HALF_PLANS = {"ac": "{samples} samples, top {topk}, {cem_steps} iterations, H = {horizon}",
              "lewm": "{num_samples} samples, top {topk}, {n_steps} steps, horizon {horizon}"}


def _half_kernel(row: dict[str, Any]) -> str:
    """The kernel a half file ran on: its type's part of the kernel line, and the cap it ran under."""
    parts = dict(p.split(": ", 1) for p in row["kernels"].split("; "))
    kernel = parts["bf16"] if row["ftype"] == "bf16" else parts["f32/f16"]
    return kernel + ("" if row["path"] == "default" else f" (JEPA_GEMM={row['path']})")


def render_world_half(data: dict[str, Any]) -> str:
    """tools/bench/world_half.py: half-precision plans against f32 on the same draws (world-models.md)."""
    kind = " A `--smoke` run (tiny random models)." if data.get("smoke") else ""
    lines = [run_record(data) + kind, ""]
    rows = []
    for c in data["cases"]:
        what = f"{c['title']}; {HALF_PLANS[c['kind']].format(**c['plan'])}"
        for i, h in enumerate(c["half"]):
            lk, fr, n = h["lockstep"], h["free"], h["lockstep"]["iterations"]
            first = fr["first_elites_differ"]
            rows.append([
                what if i == 0 else "", h["ftype"], _half_kernel(h),
                f"{lk['value_max_rel_err']:.1e} / {lk['value_median_rel_err']:.1e}",
                f"{lk['error_over_spread_max']:.2g}",
                f"{lk['elite_sets_differ']} of {n} ({lk['elites_swapped']} of {n * lk['topk']})",
                "never" if first is None else f"{first + 1} of {n}",
                "identical" if fr["actions_identical"] else f"{fr['actions_max_rel_err']:.1e}",
                f"{fr['f32_value_of_plan_ratio']:.4f}",
            ])
    header = ["model; plan", "file", "kernel", "value error, max / median", "rank error / f32 spread",
              "elites differ: iterations (members)", "own plan: elites first differ", "plan Δ",
              "f32 value of the plan / f32's plan"]
    lines += _table(header, rows, "lll" + "r" * 6)
    notes = []
    for c in data["cases"]:
        f = c["f32"]
        upstream = {True: ", upstream's elites in every iteration", False: ", **not** upstream's elites"}
        notes.append(f"{c['title']}: median value {f['value_median']:g}, smallest top-k gap "
                     f"{f['boundary_gap_min']:.2g} ({f['boundary_gap_over_spread_min']:.2g} of the spread)"
                     + upstream.get(f.get("elites_match_upstream"), ""))
    lines += ["", "The f32 plans: " + "; ".join(notes) + ".", "",
              f"Not measured: {data['not_measured']}.", "",
              f"Source: `tests/results/world-half.json` ({data['seconds'] / 60:.0f} min run; the "
              "per-iteration criteria and the f32 gaps against each half error are in the file)."]
    return "\n".join(lines) + "\n"


PLAN_MODELS = {
    "ac": "V-JEPA 2-AC ({n_layer} × {embed_dim} predictor, {enc_layers}-layer encoder); {samples} samples, "
          "top {topk}, {cem_steps} iterations",
    "lewm": "LeWM; {num_samples} samples, top {topk}, {n_steps} steps",
}
PLAN_FTYPES = ("f32", "f16", "bf16")


def render_bench_world_plan(data: dict[str, Any], source: str = "bench-world-plan") -> str:
    """tools/bench/world_plan.py: one full plan from frames, in process and over /rollout."""
    cfg = data["config"]
    kind = " — a `--smoke` run (tiny dims)." if data.get("smoke") else (
        " — a `--quick` run." if data.get("quick") else ".")
    kernels, mask = data["machine"]["kernels"], data["machine"].get("cpu_mask")
    if mask:  # a --cpu run: the engine, and so its servers, held to a smaller CPU class
        kernels += f" (held to {mask}: `JEPA_CPU_FEATURES={mask}`)"
    lines = [run_record(data) + f" Kernels: {kernels}; {cfg['threads']} threads" + kind, ""]
    if data.get("reduced"):
        lines += ["**Reduced for this CPU:** " + "; ".join(data["reduced"]) + " (widths and token counts as "
                  "released).", ""]
    cells = sorted(data["cells"],
                   key=lambda c: (c["model"] != "ac", c["horizon"], PLAN_FTYPES.index(c["ftype"])))
    f32 = {(c["model"], c["horizon"]): c["jepa_plan"]["s"] for c in cells if c["ftype"] == "f32"}
    rows, shown = [], set()
    for c in cells:
        key = (c["model"], c["horizon"])
        what = PLAN_MODELS[c["model"]].format(**cfg[c["model"]], **c["plan"])
        p, one, four = c["jepa_plan"], c["rollout"]["1"], c["rollout"]["4"]
        base = f32.get(key)
        rows.append([
            "" if c["model"] in shown else what, str(c["horizon"]), c["ftype"], f"{p['s']:.2f}",
            f"{p['encode_two_frames_s']:.2f}", "–" if base is None else f"{base / p['s']:.2f}×",
            f"{one['plans_s']:.3g}", f"{four['plans_s']:.3g}", f"{four['latency_ms']['p50'] / 1000:.2f}",
            _others(four),
        ])
        shown.add(c["model"])
    header = ["model; plan", "H", "file", "jepa.plan s", "its 2 encodes s", "f32 / this", "/rollout plans/s, "
              "1 planner", "plans/s, 4 planners", "4 planners: p50 s", "other load"]
    lines += _table(header, rows, "lrl" + "r" * 7)
    bad = sum(c["rollout"][n]["mismatches"] for c in data["cells"] for n in c["rollout"])
    four = data["cells"][0]["rollout"]["4"]
    lines += [
        "",
        f"jepa.plan: the median of {cfg['rounds']} calls after a one-iteration warm-up, on frames (JPEG "
        "bytes: both encoded in every call). /rollout: 1 client (1 worker of all the threads), then 4 at "
        f"once ({four['workers']} workers × {four['threads_per_worker']} threads), "
        f"{cfg['requests_per_client']} plan(s) each; plans/s over the wall time. " + (
            "Every answer's plan is jepa.plan's, bit for bit." if bad == 0 else f"**{bad} answers differ "
            "from jepa.plan's.**"),
        "",
        f"Source: `tests/results/{source}.json` ({data['seconds'] / 60:.0f} min run).",
    ]
    return "\n".join(lines) + "\n"


def run_record(data: dict[str, Any]) -> str:
    """The line every results table starts with: when, on what, from which commit and build."""
    m = data.get("machine", {})
    when = data.get("measured_at") or data.get("started") or "an unrecorded date"
    cpu = m.get("cpu") or m.get("model") or "an unrecorded CPU"
    flags = m.get("cpu_flags") or m.get("simd") or []
    build = data.get("build") or NATIVE_BUILD
    return (f"Measured {when} on {cpu} ({m.get('cores', '?')} cores"
            + (f"; {', '.join(flags)}" if flags else "") + f"), {build}, commit "
            f"`{data.get('commit', 'unrecorded')}`.")


def render_bench_video(data: dict[str, Any]) -> str:
    """bench-video.json (tools/bench/video.py): the V-JEPA 2 ViT-L/16 clip against transformers'
    VJEPA2Model."""
    lines = [run_record(data), "", *held_lines(data),
             f"{data['model']}; {data['threads']} threads, {data['rounds']} timed rounds (interleaved, "
             f"after a warm-up); {data.get('torch', 'PyTorch')}.", ""]
    rows = []
    labels = {"jepa-f32": "jepa f32 (flash attention, auto)", "jepa-f16": "jepa f16 weights"}
    for k, label in labels.items():
        if k not in data["seconds_per_clip"]:
            continue
        par = data["parity_vs_torch"][k]
        sec = data["seconds_per_clip"]
        rows.append([label, f"{sec[k]:.2f}", f"{sec['torch']:.2f}", _ratio(data["ratio_torch_over_jepa"][k]),
                     _ratio(data["ratio_of_best_torch_over_jepa"][k]),
                     f"{_one_minus(par['min_cos'])}, rel {par['rel']:.1e}"])
    lines += _table(["variant", "jepa s/clip", "torch s/clip", "torch / jepa (median)", "best-round ratio",
                     "tokens vs torch (min cosine, max\\|Δ\\| / max\\|ref\\|)"], rows, "lrrrrl")
    return "\n".join(lines) + "\n"


FAMILY_VARIANTS = {"torch-f32": "upstream PyTorch (f32)", "ort-f32": "ONNX Runtime f32 (its export)",
                   "ov-f32": "OpenVINO f32 (its export)", "jepa-f32": "jepa f32", "jepa-bf16": "jepa bf16"}


def _export_note(cell: dict[str, Any]) -> str:
    """Which exporter fed the ONNX peers, or why there are none (each attempt's first line)."""
    exp = cell.get("onnx_export")
    if exp is None:
        return "No ONNX peers in this run."
    if exp["exporter"]:
        return f"ONNX peers on the `{exp['exporter']}` export (opset {exp['opset']})."
    why = []
    for exporter, tried in exp["attempts"].items():
        for step, msg in tried.items():
            if not msg.startswith("ok"):
                first = msg.splitlines()[0][:160].replace("|", "\\|")
                why.append(f"{exporter} {'export' if step == 'export' else 'file, ' + step}: `{first}`")
    return "No ONNX peer: the upstream module exports but no runtime takes the file (" + "; ".join(why) + ")."


def render_bench_video_families(data: dict[str, Any]) -> str:
    """bench-video-families.json (tools/bench/video_families.py): V-JEPA 2.1 and LeVJEPA encoders beside
    their upstream code, ORT and OpenVINO on its export, one clip."""
    lines = [run_record(data) + (" A `--smoke` run (tiny sizes)." if data.get("smoke") else ""), "",
             *held_lines(data)]
    for c in data["cells"]:
        s = c["spec"]
        sec, best, rat = c["seconds_per_clip"], c["best_seconds_per_clip"], c["ratios"]
        par = c["parity_vs_torch"]
        exact = [p for p in ("ort-f32", "ov-f32") if p in sec]
        lines += [f"**{c['model']}**: width {s['width']}, {s['depth']} blocks, {s['heads']} heads, "
                  f"{s['frames']} frames at {s['img']} px, tubelet {s['tubelet']} = {s['n_tokens']} tokens; "
                  f"{c['threads']} threads, {c['rounds']} timed rounds (interleaved, after a warm-up"
                  + (f"; {c['pause_s']:g} s idle before each call" if c.get("pause_s") else "") + "). "
                  + _export_note(c), ""]
        rows = []
        for k, label in FAMILY_VARIANTS.items():
            if k not in sec:
                continue
            p = par.get(k)
            rows.append([label, f"{sec[k]:.2f}", f"{best[k]:.2f}",
                         _ratio(rat.get(f"torch-f32 / {k}")) if k.startswith("jepa") else "",
                         (_ratio(rat.get(f"faster of ORT/OV / {k}")) if exact else "no ONNX peer")
                         if k.startswith("jepa") else "",
                         "reference" if p is None else f"{_one_minus(p['min_cos'])}, rel {p['rel']:.1e}"])
        header = ["variant", "s/clip (median)", "best round", "PyTorch / this", "faster of ORT, OV / this",
                  "tokens vs PyTorch (min cosine, max\\|Δ\\| / max\\|ref\\|)"]
        lines += _table(header, rows, "lrrrrl")
        key, goal = ("faster of ORT/OV / jepa-f32", 1.0) if exact else ("torch-f32 / jepa-f32", 1.5)
        got = rat[key]
        met = "met" if got >= goal else "**not met**"
        lines += ["", f"Goal: {c['goal']}: {got:.2f}× — {met}.", ""]
    lines += [f"Source: `tests/results/bench-video-families.json` (`python tools/bench/video_families.py "
              "--vjepa2-tree <vjepa2 at 204698b> --levjepa-tree <LeVJEPA module.py at 481a99b>`; "
              f"load average over the run {_loads(data)})."]
    return "\n".join(lines) + "\n"


def _loads(data: dict[str, Any]) -> str:
    one = [la[0] for c in data["cells"] for la in c.get("load_average", [])]
    if not one:
        return "unrecorded"
    return f"{min(one):.1f}–{max(one):.1f} on {data['machine'].get('cores', '?')} cores"


def render_server_bench(data: dict[str, Any]) -> str:
    """server-bench.json (tools/bench/server.py): the max-batch x clients grid against in-process
    jepa.embed, the /health control, --max-wait-ms 0, and the planner cell; schema 1 (one saturated
    server at max-batch 8 and 1) renders its summary."""
    if data.get("schema", 1) < 2:
        return _render_server_bench_v1(data)
    s, st, m = data["summary"], data["settings"], data["model"]
    goals = s["goals"]
    top = max(st["clients"])
    kind = " — a `--smoke` run (tiny models)." if data.get("smoke") else "."
    model = (f"a ViT {m['embed_dim']} wide × {m['n_layer']} blocks at {m['img_size']} px ({m['ftype']} "
             "matrices, random weights)" if m.get("file") == "random" else f"`{m['file']}`")
    lines = [
        run_record(data),
        "",
        f"{model}; {len(st['photos'])} scikit-image photos as JPEG, one per `/v1/embeddings` request "
        f"({st['encoding_format']} answers); one server per row's `--max-batch`, `--workers "
        f"{st['workers']} --threads {st['threads']}`; {st['requests']} timed requests per cell after a "
        f"warm-up, {st['rounds']} interleaved rounds, medians over rounds, ratios paired within a round"
        + kind,
        "",
        "*Mean batch*: the graphs' mean size over the timed window, read off `/metrics` (what happened, "
        "not the cap). *Batching*: req/s over `--max-batch 1` at the same clients. *Server / in-process*: "
        "req/s over `jepa.embed`'s img/s on the same bytes, model, threads and max-batch. */health*: the "
        "control, GET /health at the same clients on the same server. *Other load*: the share of the "
        f"cores other processes took during the cell. Under its goal at {top} clients in **bold** "
        f"(batching ≥ {goals['batching_gain']}×, server / in-process ≥ {goals['server_over_inproc']:.2f}).",
        "",
    ]
    rows = []
    for c in s["cells"]:
        gain, ratio = _ratio(c["batching_gain"]), f"{c['server_over_inproc']:.2f}"
        if c["clients"] == top and c["max_wait_ms"] is None:
            if c["batching_gain"] is not None and c["batching_gain"] < goals["batching_gain"]:
                gain = f"**{gain}**"
            if c["server_over_inproc"] < goals["server_over_inproc"]:
                ratio = f"**{ratio}**"
        lat = c["latency_ms"]
        rows.append([
            str(c["max_batch"])
            + ("" if c["max_wait_ms"] is None else f", `--max-wait-ms {c['max_wait_ms']:g}`"),
            str(c["clients"]), f"{c['req_s']:.1f}", _ms(lat["p50"]), _ms(lat["p95"]), _ms(lat["p99"]),
            "–" if c["mean_batch"] is None else f"{c['mean_batch']:.2f}", gain, f"{c['inproc_img_s']:.1f}",
            ratio, "–" if c["health_req_s"] is None else f"{c['health_req_s']:.0f}", _others(c),
        ])  # fmt: skip
    lines += _table(["max-batch", "clients", "req/s", "p50 ms", "p95 ms", "p99 ms", "mean batch", "batching",
                     "jepa.embed img/s", "server / in-process", "/health req/s", "other load"], rows,
                    "lrrrrrrrrrrr")  # fmt: skip
    best, sat = s["best_batching_gain"], s["saturated"]
    engine = s["inproc_batching_gain"]
    most = max(engine, key=int)
    lines += [
        "",
        f"Against the goals at {top} clients: batching {_goal(best['gain'], goals['batching_gain'], 'x')} at "
        f"best (`--max-batch "
        f"{best['max_batch']}`; goal {goals['batching_gain']}×), where `jepa.embed` itself gains "
        f"{_ratio(engine[most])} from max_batch {most} over 1 on this machine (the bound on what the "
        f"server's batching can give); a saturated server (`--max-batch "
        f"{sat['max_batch']}`) at {_goal(sat['server_over_inproc'], goals['server_over_inproc'])} of "
        "in-process (goal "
        f"{goals['server_over_inproc']:.2f}). Decode + preprocess: {s['prepare_ms']:.1f} ms a photo, "
        f"{100 * s['prepare_share_of_worker']:.0f} % of an in-process run. Every vector the servers "
        + ("returned equals in-process `jepa.embed`'s bit for bit." if not s["mismatches"] else
           f"returned was checked: **{s['mismatches']} differed** from in-process `jepa.embed`."),
    ]
    p = data.get("planner")
    if p:
        pm, plan = p["model"], p["plan"]
        lines += [
            "",
            f"Planner: a LeWM file ({pm['enc_dim']}-wide ViT, {_blocks(pm['enc_layers'])} at "
            f"{pm['img_size']} px; predictor {_blocks(pm['n_layer'])}; random weights) behind `--workers "
            f"{p['workers']} --threads {p['threads']}`, `/rollout` with a plan (CEM: {plan['samples']} "
            f"samples, top {plan['topk']}, "
            f"{plan['cem_steps']} steps, horizon {plan['horizon']}) from 1 client, then {p['planners']} at "
            f"once. A rollout is one candidate sequence scored ({plan['samples']} × {plan['cem_steps']} a "
            f"plan). In-process `jepa.plan` at {_threads(p['threads'])}: {p['inproc_plan_s']:.2f} s a plan "
            f"({p['inproc_rollouts_s']:.0f} rollouts/s).",
            "",
        ]
        rows = []
        for ph in p["phases"].values():
            lat = ph["latency_ms"]
            rows.append([str(ph["planners"]), str(ph["plans"]), f"{ph['plans_s']:.2f}",
                         f"{ph['rollouts_s']:.0f}", _ms(lat["p50"]), _ms(lat["max"]), f"{ph['overlap']:.1f}",
                         f"{ph['rss_mb_peak']:.0f}",
                         _others(ph)])  # fmt: skip
        lines += _table(["planners", "plans", "plans/s", "rollouts/s", "p50 ms", "max ms", "running at once",
                         "peak RSS MiB", "other load"], rows, "rrrrrrrrr")  # fmt: skip
        per = p["rss_mb_per_added_planner"]
        lines += [
            "",
            "Server memory (VmRSS sampled every 10 ms, on the workers' first plans: a worker keeps its "
            f"buffers; *peak RSS* above): {p['rss_mb_idle']:.0f} MiB idle; the first planner "
            f"adds {p['rss_mb_first_planner']:.0f} MiB"
            + ("" if per is None else f", each further concurrent planner {per:.0f} MiB")
            + ". Every plan " + ("equals in-process `jepa.plan`'s bit for bit." if not p["mismatches"] else
                                 f"was checked: **{p['mismatches']} differed** from in-process `jepa.plan`."),
        ]
    lines += ["", f"Source: `tests/results/server-bench.json` ({data['seconds'] / 60:.0f} min run; every "
              "round's cells, latency headers, CPU shares and per-photo decode times are in the file)."]
    return "\n".join(lines) + "\n"


def _goal(v: float | None, goal: float, unit: str = "") -> str:
    """A measured figure against its goal: bold when under it."""
    if v is None:
        return "–"
    txt = _ratio(v) if unit == "x" else f"{v:.2f}"
    return f"**{txt}** (under the goal)" if v < goal else txt


def _blocks(n: int) -> str:
    return f"{n} block" + ("" if n == 1 else "s")


def _render_server_bench_v1(data: dict[str, Any]) -> str:
    s, st = data["summary"], data["settings"]
    rec = run_record({**data, "commit": data.get("git", {}).get("commit", "unrecorded")[:12]})
    lines = [
        "_A run of the first version of the benchmark: one saturated server (max-batch "
        f"{st['max_batch']} and 1, {st['clients']} clients), before the grid, the /health control and the "
        "planner cell; rerun `tools/bench/server.py` for them._",
        "",
        rec,
        "",
    ]
    rows = [["in-process `jepa.embed`", f"{s['inproc_img_s']:.1f}", "–", "–", "–", "–"],
            [f"server, max-batch {st['max_batch']}", f"{s['server_img_s']:.1f}", f"{s['mean_batch']:.2f}",
             _ms(s["latency_ms_p50"]), _ms(s["latency_ms_p99"]), f"{s['server_over_inproc']:.2f}"],
            ["server, max-batch 1", f"{s['server_b1_img_s']:.1f}", "1.00", "–", "–", "–"]]  # fmt: skip
    lines += _table(["cell", "img/s", "mean batch", "p50 ms", "p99 ms", "server / in-process"], rows,
                    "lrrrrr")
    lines += ["", f"Batching (max-batch {st['max_batch']} over 1): {_ratio(s['batching_gain'])}.", "",
              "Source: `tests/results/server-bench.json`."]
    return "\n".join(lines) + "\n"


# sim_scheduler.py's policy names -> row labels, in the table's row order.
SIM_POLICIES = {"converging": "converging queue", "static-even": "static, even",
                "static-guess": "static, guessed ratio", "static-oracle": "static, true ratio (not runnable)"}


def render_scheduler_sim(data: dict[str, Any]) -> str:
    """scheduler-sim.json (tools/sim_scheduler.py): the multi-device scheduler on a virtual clock
    against static splits."""
    devs = [d["name"] for d in data["devices"]]
    conv = data["policies"]["converging"]["makespan_s"]
    mix = ", ".join(f"{w['items']} × {'a photo' if w['frames'] == 1 else str(w['frames']) + ' frames'}"
                    for w in data["workload"])
    speeds = " : ".join(f"{d['name']} {d['relative_speed']:g}" for d in data["devices"])
    lines = [
        f"Simulated {data.get('simulated_at', 'at an unrecorded date')} at commit "
        f"`{data.get('commit', 'unrecorded')}`. "
        "A simulation, not a measurement: the server's `Scheduler` on a virtual clock "
        f"(seed {data['seed']}), one burst of {mix} (ViT-L/16 at {data['model']['img_size']} px), "
        f"max-batch {data['max_batch']}, "
        f"two devices {speeds} in speed. The guessed ratio is 1:{data['guessed_ratio']:g}.",
        "",
    ]
    rows = []
    for key, label in SIM_POLICIES.items():
        p = data["policies"][key]
        cells = [label, f"{p['makespan_s']:.2f}", _ratio(conv / p["makespan_s"])]
        for name in devs:
            d = p["devices"][name]
            cells += [f"{d['idle_s']:.2f}", f"{100 * d['cost_share']:.0f}%"]
        rows.append(cells)
    header = ["policy", "makespan s", "converging / this"]
    for name in devs:
        header += [f"{name} idle s", f"{name} share"]
    lines += _table(header, rows, "lrr" + "rr" * len(devs))
    best = SIM_POLICIES[data["best_static"]]
    lines += ["", f"The converging queue ends the burst in {_ratio(data['ratio_vs_best_static'])} the best "
              f"static split's time ({best}) and {_ratio(data['ratio_vs_even'])} the even split's; the "
              f"bound (total cost over the summed speeds) is {data['ideal_makespan_s']:.2f} s.",
              ""]
    sweep = data.get("static_by_guess", [])
    if sweep:
        lines += ["A static split by other guesses of the ratio (the true one is "
                  f"1:{data['true_ratio']:g}):", ""]
        lines += _table(["guessed ratio", *(f"1:{g['ratio']:g}" for g in sweep)],
                        [["static makespan s", *(f"{g['makespan_s']:.2f}" for g in sweep)],
                         ["converging / static", *(_ratio(g["converging_over_it"]) for g in sweep)]],
                        "l" + "r" * len(sweep))
        lines += [""]
    lines += ["Source: `tests/results/scheduler-sim.json` (`python tools/sim_scheduler.py`)."]
    return "\n".join(lines) + "\n"


def render_bench_load(data: dict[str, Any]) -> str:
    """bench-load.json (tools/bench/load.py): a cold load read into memory of its own against
    memory-mapped, warm and cold page cache, per file type, and two processes on one file."""
    shape = data["model_shape"]
    lines = [run_record(data), "",
             f"ViT-L/16-shaped file ({shape['embed_dim']} wide, {shape['n_layer']} blocks), random weights; "
             f"medians of {data['rounds']} rounds, each cell a fresh process:", ""]
    rows = []
    for c in data["cells"].values():
        m = c["median"]
        name = f"{c['model']} ({data['file_mb'][c['model']]:.0f} MiB)"
        rows.append([name, "mapped" if c["mode"] == "mmap" else "read", c["cache"],
                     f"{m['load_s'] * 1000:.0f}", f"{m['first_s'] * 1000:.0f}", f"{m['rss_mb']:.0f}",
                     f"{m['anon_mb']:.0f}", f"{m['file_mb']:.0f}", f"{m['n_bytes_mapped_mb']:.0f}"])
    lines += _table(["file", "weights", "page cache", "load ms", "first encode ms", "RSS MiB",
                     "of it own MiB", "of it file pages MiB", "mapped MiB"], rows, "lllrrrrrr")
    rows = []
    for name, pair in data["two_processes"].items():
        model, mode = name.split("-", 1)
        a, b = pair["first"]["pss_while_shared_mb"], pair["second"]["pss_while_shared_mb"]
        weights = "mapped" if mode == "mmap" else "read"
        rows.append([model, weights, f"{a:.0f}", f"{b:.0f}", f"{a + b:.0f}"])
    lines += ["", "Two processes serving one file (warm), proportional set size of each while both map it:",
              ""]
    lines += _table(["file", "weights", "first PSS MiB", "second PSS MiB", "both MiB"], rows, "llrrr")
    lines += ["", "Source: `tests/results/bench-load.json` (`python tools/bench/load.py`)."]
    return "\n".join(lines) + "\n"


def _bench_ray_memory(data: dict[str, Any]) -> str:
    s, st = data["summary"], data["settings"]
    mem = s.get("memory")
    busy = [c["machine_cpu_share"] for r in data["rounds"] for k, c in r.items()
            if not k.startswith("health")]  # fmt: skip
    load = (f"The machine's cores were {100 * statistics.median(busy):.0f}% busy (median over the embed "
            "cells: this run's clients and servers included; the machine is shared).") if busy else ""
    if not mem:
        return load
    cells = st["cells"]
    replicas = ", ".join(f"{v:.0f}" for v in mem["ray_replica_rss_mb"])
    return (f"Resident memory, warm, MiB: each Ray replica {replicas}; Ray's own processes on the node "
            f"(GCS, raylet, controller, proxy, ...) {mem['ray_system_rss_mb']:.0f} in all; jepa-server "
            f"`--workers {st['replicas']}` {mem['server_rss_mb'][cells['split']]:.0f}, `--workers 1` "
            f"{mem['server_rss_mb'][cells['whole']]:.0f}. " + load)


def _rounds(n: int) -> str:
    return "one round" if n == 1 else f"{n} interleaved rounds"


def render_bench_ray(data: dict[str, Any]) -> str:
    """bench-ray.json: jepa_server.ray on a local Ray cluster against jepa-server at the same cores."""
    s, st = data["summary"], data["settings"]
    cells = st["cells"]
    ray, split, whole = cells["ray"], cells["split"], cells["whole"]
    kind = " — a `--smoke` run (a tiny model, a few requests)." if data.get("smoke") else "."
    lines = [
        run_record(data),
        "",
        f"{st['model']}, random weights, one JPEG photo per `/v1/embeddings` request, {st['clients']} "
        f"concurrent clients, max-batch {st['max_batch']}, {_rounds(st['rounds'])} of "
        f"{st['requests']} timed requests per cell (medians){kind}",
        "",
    ]
    labels = {
        ray: f"Ray Serve: {st['replicas']} replicas × {st['threads']} thread"
        + ("" if st["threads"] == 1 else "s"),
        split: f"jepa-server `--workers {st['replicas']} --threads {st['threads']}`",
        whole: f"jepa-server `--workers 1 --threads {st['cores']}`",
    }
    best = max(s["server_req_s"].values())
    cpu = s.get("cpu_ms_per_req", {})
    rows = []
    for key, label in labels.items():
        rate = s["ray_req_s"] if key == ray else s["server_req_s"][key]
        lat = s["latency_ms"][key]
        rows.append([label, f"{rate:.1f}", _ms(lat["p50"]), _ms(lat["p95"]), _ms(lat["p99"]),
                     f"{rate / best:.2f}×", f"{cpu[key]:.1f}" if key in cpu else "–"])  # fmt: skip
    lines += _table(["path", "req/s", "p50 ms", "p95 ms", "p99 ms", "req/s of the faster jepa-server's",
                     "CPU ms / request"], rows, "lrrrrrr")  # fmt: skip
    by_cpu = s.get("ray_over_server_by_cpu")
    if by_cpu is not None:
        lines += ["", "*CPU ms / request*: the CPU time every process of the path spent (for Ray: its "
                  "GCS, raylet, controller, proxy and replicas) over the answers; unlike req/s it does not "
                  "depend on what else the machine runs. Where the path has the cores to itself, "
                  f"throughput goes as its inverse: Ray at **{_ratio(by_cpu)}** of the cheaper jepa-server."]
    ratio, goal = s["ray_over_server"], s["goal"]
    hop, health, one = s["hop"], s["health_req_s"], s["health_p50_ms_one_client"]
    spread = ", ".join(str(n) for n in sorted(s["replica_spread"].values(), reverse=True))
    lines += [
        "",
        f"Ray over the faster jepa-server configuration, paired within each round: "
        f"**{_ratio(ratio)}** (goal {goal:g}×{'' if ratio is None or ratio >= goal else ', **not met**'}; "
        "round by round " + ", ".join(_ratio(r[ray]["req_s"] / max(r[split]["req_s"], r[whole]["req_s"]))
                                      for r in data["rounds"]) + "); "
        f"over the same split (`--workers {st['replicas']}`): {_ratio(s['ray_over_same_split'])}. "
        f"The routing alone, `GET /health` without the engine: {health[ray]:.0f} req/s through Ray against "
        f"{health[split]:.0f} from jepa-server at {st['clients']} clients, and a median "
        f"{_ms(one[ray])} ms against {_ms(one[split])} ms at one client. Of that, the replica's "
        f"Unix-socket hop into jepa-server's app is {hop['unix_hop_ms']:.2f} ms a request "
        f"({hop['tcp_loopback_ms']:.2f} ms for the same app over loopback TCP); the rest is Ray's proxy, "
        f"router and actor call. {4 * st['clients']} concurrent requests spread over the replicas "
        f"{spread}. "
        + ("Every answer equals in-process `jepa.embed` bit for bit." if not s["mismatches"] else
           f"**{s['mismatches']} answers differed** from in-process `jepa.embed`."),
        "",
        _bench_ray_memory(data),
        "",
        f"Source: `tests/results/bench-ray.json` ({data['seconds'] / 60:.0f} min run; every round's cells, "
        "the share of the machine's cores in use during each, and the CPU's flags are in the file).",
    ]
    return "\n".join(lines) + "\n"


TEXT_VARIANTS = {"st-torch": "sentence-transformers (PyTorch)", "ort-f32": "ONNX Runtime f32",
                 "ort-f32-sorted": "ONNX Runtime f32, length-sorted batches", "jepa-f32": "jepa f32",
                 "jepa-f16": "jepa f16"}


def _cpu_option(data: dict[str, Any]) -> str:
    """The --cpu option that reruns a record's CPU class: its mask, or x86-64-v3 for an `--isa avx2`
    record (the AVX2 class before JEPA_CPU_FEATURES)."""
    mask = data.get("machine", {}).get("cpu_mask")
    if not mask and data.get("isa", {}).get("cap") == "avx2":
        mask = "x86-64-v3"
    return f" --cpu {mask}" if mask else ""


def render_bench_text(data: dict[str, Any], source: str = "bench-text") -> str:
    """bench-text.json (tools/bench/text.py): the text encoder against sentence-transformers and
    ONNX Runtime on real weights and real sentences, tokens per second, padding and parity."""
    lines = [run_record(data), "", *held_lines(data)]
    t = data["tokens_per_text"]
    lines.append(
        f"{data['model']}, {data['texts']} texts of the standard library's docstrings ({t['min']}-{t['max']} "
        f"tokens, median {t['median']:g}; {data['truncated_texts']} truncated to max_seq_len), batches of "
        f"{data['batch']} texts, {data['threads']} threads, text in and normalised vector out (tokenization "
        f"included), variants interleaved, median of {data['rounds']} rounds:"
    )
    lines.append("")
    r = data["ratios"]
    ratio = {"st-torch": (r["jepa-f32 / st-torch"], r["jepa-f16 / st-torch"]),
             "ort-f32": (r["jepa-f32 / ort-f32"], r["jepa-f16 / ort-f32"]),
             "ort-f32-sorted": (r.get("jepa-f32 / ort-f32-sorted"), r.get("jepa-f16 / ort-f32-sorted"))}
    rows = []
    for key, label in TEXT_VARIANTS.items():
        if key not in data["tokens_per_s"]:
            continue
        f32, f16 = ratio.get(key, (None, None))
        par = data["parity_vs_st"].get(key)
        rows.append([
            label, f"{data['tokens_per_s'][key]:,.0f}",
            _ratio(f32) if f32 else "—", _ratio(f16) if f16 else "—",
            f"{100 * data['padding_waste'][key]:.1f}%",
            "reference" if par is None else f"{par['min_cos']:.7f}",
            "—" if par is None else f"{par['max_abs_diff']:.1e}",
        ])
    lines += _table(["variant", "real tokens/s", "jepa f32 / this", "jepa f16 / this", "padding computed",
                     "min cosine vs ST", "max abs diff vs ST"], rows, "lrrrrrr")
    lines += [
        "",
        "Token ids identical to the model's own tokenizer: "
        f"{'yes' if data['token_ids_identical'] else 'NO'}; a text's vector alone = in its batch, bit for "
        f"bit: {'yes' if data['bit_identical_alone_vs_batch'] else 'NO'}. Padding computed: the padded "
        "positions a peer runs through the network, as a share of the real tokens (jepa lays a batch's "
        "texts end to end).",
        "",
        f"Source: `tests/results/{source}.json` (`python tools/bench/text.py{_cpu_option(data)}`).",
    ]
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "bench-engine": render_bench_engine,
    # bench/engine.py's q8_0 / q4_k rows (docs/quantize.md)
    "bench-quant": lambda data: render_bench_engine_peers(data, "bench-quant"),
    # the int8 class: jepa q8_0 beside ORT's and OpenVINO's int8 (docs/quantize.md)
    "bench-int8": lambda data: render_bench_engine_peers(data, "bench-int8"),
    "bench-video": render_bench_video,
    "bench-video-families": render_bench_video_families,
    "bench-world": render_bench_world,
    "bench-world-avx2": lambda data: render_bench_world(data, "bench-world-avx2"),
    "world-half": render_world_half,
    "bench-world-plan": render_bench_world_plan,
    # the same run with the engine held to the AVX2 class (--cpu x86-64-v3; before it, --isa avx2)
    "bench-world-plan-avx2": lambda data: render_bench_world_plan(data, "bench-world-plan-avx2"),
    "bench-text": render_bench_text,
    # the same runs held to AVX2 (--isa avx2)
    "bench-engine-avx2": lambda data: render_bench_engine_peers(data, "bench-engine-avx2"),
    # the native path on the CPU the AVX2 run used (its same-machine yardstick)
    "bench-engine-epyc": lambda data: render_bench_engine_peers(data, "bench-engine-epyc"),
    # batch 1 / 8 / 32 and the clip after the cache blocking (csrc/src/cpu/caches.h), native path
    "bench-engine-batches": lambda data: render_bench_engine_peers(data, "bench-engine-batches"),
    "bench-text-avx2": lambda data: render_bench_text(data, "bench-text-avx2"),
    "server-bench": render_server_bench,
    "scheduler-sim": render_scheduler_sim,
    "bench-load": render_bench_load,
    "bench-ray": render_bench_ray,
}


def _declared() -> dict[str, Callable[[], str]]:
    """Blocks rendered from a declaration in the package rather than from a results file: the GGUF
    schema's key and tensor tables (docs/gguf.md), the server's settings, budgets and refusals
    (docs/serving.md), and the modules of both packages by floor (docs/architecture.md)."""
    sys.path[:0] = [str(ROOT / "python"), str(ROOT / "server"), str(ROOT / "tools")]
    try:
        import import_graph

        from jepa import cpu
        from jepa.gguf import schema_doc
        from jepa_server.budget_table import budgets_table
        from jepa_server.refusals import refusals_table
        from jepa_server.settings import settings_table
    finally:
        del sys.path[:3]
    return {
        "gguf-keys": schema_doc.render_keys,
        "gguf-tensors": schema_doc.render_tensors,
        "serving-settings": lambda: settings_table() + "\n",
        "serving-budgets": budgets_table,
        "serving-refusals": refusals_table,
        "architecture-modules": import_graph.render_modules,
        "cpu-classes": lambda: render_cpu_classes(cpu.cpu_classes(), cpu.FEATURE_NAMES),
        "cpu-paths": lambda: render_cpu_paths(cpu.kernel_paths()),
    }


def render_cpu_classes(classes: Sequence[Any], feature_names: Sequence[str]) -> str:
    """docs/cpu.md's classes (jepa.cpu.cpu_classes(): csrc/src/cpu/features.cpp), features in the
    engine's order."""
    order = {name: i for i, name in enumerate(feature_names)}
    rows = [[f"`{c.name}`", ", ".join(sorted(c.features, key=order.__getitem__)) or "(none)", c.example]
            for c in classes]
    return "\n".join(_table(["class", "features", "stands for"], rows, "lll")) + "\n"


def render_cpu_paths(paths: Sequence[Any]) -> str:
    """docs/cpu.md's kernel-path table (jepa.cpu.kernel_paths(): csrc/src/cpu/paths.cpp), its declared
    caps only: what a row runs depends on the CPU."""
    def cap(v: str) -> str:
        return "widened to f32" if v == "widen" else v

    rows = [[f"`{p.name}`", p.f32_cap, cap(p.bf16_cap), p.q8_cap, "yes" if p.amx else "no", p.stands_for]
            for p in paths]
    return "\n".join(_table(["`JEPA_GEMM`", "f32 / f16", "bf16 weights", "q8_0", "AMX", "stands for"], rows,
                             "llllll")) + "\n"



DECLARED = ("gguf-keys", "gguf-tensors", "serving-settings", "serving-budgets", "serving-refusals",
            "architecture-modules", "cpu-classes", "cpu-paths")


def render_block(name: str) -> str:
    if name in DECLARED:
        return _declared()[name]()
    renderer = RENDERERS.get(name)
    if renderer is None:
        raise SystemExit(f"render_docs: no renderer named {name!r} (known: {', '.join(RENDERERS)})")
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        return f"_No results yet: `tests/results/{name}.json` is missing._\n"
    return renderer(json.loads(path.read_text()))


def render_doc(text: str) -> str:
    return BLOCK.sub(lambda m: m["begin"] + render_block(m["name"]) + m["end"], text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when a doc differs from its rendering")
    args = p.parse_args(argv)
    stale = []
    for doc in sorted(DOCS.glob("*.md")):
        text = doc.read_text()
        new = render_doc(text)
        if new == text:
            continue
        if args.check:
            stale.append(doc.relative_to(ROOT))
        else:
            doc.write_text(new)
            print(f"rendered {doc.relative_to(ROOT)}")
    if stale:
        names = ", ".join(map(str, stale))
        print(f"stale: {names} (run: python tools/render_docs.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
