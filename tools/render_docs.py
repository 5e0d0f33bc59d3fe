#!/usr/bin/env python3
"""Render the generated blocks of docs/*.md from tests/results/*.json.

A doc marks a generated block with

    <!-- BEGIN GENERATED: bench-engine -->
    ...
    <!-- END GENERATED: bench-engine -->

and the text between the markers is replaced by the renderer of that name, fed with
tests/results/<name>.json. Everything outside the markers is prose and left alone.

    python tools/render_docs.py           # rewrite the docs
    python tools/render_docs.py --check   # exit 1 when a doc is stale (tests/test_docs_current.py)"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
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
    m, v = data["machine"], data["versions"]
    lines = [
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
    "ac_step": "V-JEPA 2-AC rollout step (`ac_predict`, K = {K}, {H} frames)",
    "ac_cem_iter": "V-JEPA 2-AC CEM iteration (`ac_plan`, K = {K} samples, H = {H})",
    "lewm_step": "LeWM predict step (`lewm_predict`, K = {K}, a {T}-step window)",
    "lewm_plan": "LeWM plan (`lewm_plan`, {num_samples} samples × {n_steps} steps, horizon {horizon})",
}


def render_bench_world(data: dict[str, Any]) -> str:
    m, v, cfg = data["machine"], data["versions"], data["config"]
    ac = cfg["ac"]
    kind = " — a `--smoke` run (tiny dims)." if data.get("smoke") else (
        " — a `--quick` run." if data.get("quick") else ".")
    lines = [
        f"Measured {data['started'][:10]} on {m['cpu']} ({m['cores']} cores, {', '.join(m['simd'])}), "
        f"{m['threads']} threads; jepa {v['jepa']} on ggml {v['ggml']}. Random weights; V-JEPA 2-AC "
        f"predictor {ac['n_layer']} blocks × {ac['embed_dim']} ({ac['n_head']} heads, MLP {ac['ffn_dim']}) "
        f"on {ac['enc_dim']}-wide latents, {ac['tokens_per_frame']} patch tokens per frame" + kind,
        "",
    ]
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
    for c in data["cells"]:
        what = WORLD_CELLS.get(c["cell"], c["cell"]).format(**c)
        ms = c["ms"]
        best = {ft: min(c["samples_ms"][ft]) for ft in ("f32", "f16")}
        rows.append([what, _ms(ms["f32"]), _ms(ms["f16"]), f"{ms['f16'] / ms['f32']:.2f}", _ms(best["f32"]),
                     _ms(best["f16"]), str(c["rounds"]), _others(c)])
    header = ["cell", "f32 ms", "f16 ms", "f16 / f32", "f32 best", "f16 best", "rounds", "other load"]
    lines += _table(header, rows, "lrrrrrrr")
    lines += [
        "",
        f"Upstream PyTorch: {data['upstream']}.",
        "",
        f"Source: `tests/results/bench-world.json` ({data['seconds'] / 60:.0f} min run; per-round samples "
        "and the load average around each cell are in the file).",
    ]
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "bench-engine": render_bench_engine,
    "bench-world": render_bench_world,
}


def render_block(name: str) -> str:
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
