"""jepa against ONNX Runtime, OpenVINO and PyTorch on the same ViTs, weights, inputs and threads
-> tests/results/bench-engine.json.

For each model (ViT-S/16 and ViT-L/16 at 224, the V-JEPA 2 ViT-L/16 video encoder on one 16-frame
256 px clip; random weights; bench.vit) the transformers model (ViTModel / VJEPA2Model) is built once and
  - saved with save_pretrained and converted by jepa-convert to f32, bf16 and f16 GGUF files;
  - exported once with torch.onnx.export (f32, dynamic batch axis) for the ONNX peers;
so every engine runs the same network and weights. Variants, in three precision classes:

  exact: torch-f32 (eager), ort-f32 (ONNX Runtime, CPU EP), ov-f32 (OpenVINO), jepa-f32
  half:  ov-bf16 (OpenVINO, INFERENCE_PRECISION_HINT bf16), jepa-bf16, jepa-f16
  quant: jepa-q8_0, jepa-q4_k, jepa-i8c, ort-int8, ov-int8w, ov-int8

For each batch size the variants run interleaved (the order rotates every round), the first rounds
are a warm-up and are dropped, and the median of the rest is reported as ms per item. Ratios are
peer / jepa (above 1, jepa is faster), each the median over rounds of the ratio within a round:
jepa-f32 against the faster of ort-f32 / ov-f32, jepa-bf16 and jepa-f16 against ov-bf16, jepa-q8_0
and jepa-i8c against jepa-f32 and the faster int8 peer, and every jepa variant against torch. Each cell also
records GFLOP/s (the model's FLOPs counted analytically), the share of the machine's GEMM peak for the
variant's class (bench.peaks, measured in the same run), every variant's tokens against torch f32
(max|Δ| / max|ref|, pooled-mean cosine), and for jepa batch bit-identity and threads-1 = threads-2
identity.

    python tools/bench/engine.py --threads 2            # the full run (~30 min on 2 cores)
    python tools/bench/engine.py --quick                # ViT-S, batch 1 and 8, few rounds (~3 min)
    python tools/bench/engine.py --smoke --threads 1    # tiny models, every variant (a test runs it)
    python tools/bench/engine.py --models vjepa2-l16 --update   # re-measure one model, keep the rest
    python tools/bench/engine.py --cpu x86-64-v3        # stand for an AVX2-only CPU
                                                        # -> tests/results/bench-engine-avx2.json

--cpu x86-64-v3 (or JEPA_CPU_FEATURES=x86-64-v3) measures the AVX2 class on a CPU that has more: jepa's
AVX2 kernels, PyTorch's MKL and ATen held to AVX2, the OpenBLAS peak on its Haswell core (bench.cpu).
ONNX Runtime has no such switch (MLAS picks its kernels by CPUID), nor has OpenVINO's CPU plugin
beside its int8 and bf16 graphs, so on an AVX-512 CPU their figures are their AVX-512 ones: the
JSON's "held" block says so.

A benchmark, not a test: the numbers depend on the machine and on what else runs on it (the share of
the CPUs other processes took during each cell, and the load average around it, are recorded)."""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/engine.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench import harness, peaks, peers
from bench.vit import MODELS, SMOKE_MODELS, Spec, build_torch, export, hf_layout, last_hidden

SCHEMA = 2  # the JSON's shape; tools/render_docs.py renders 1 (jepa vs torch only) and 2
BATCHES = {"image": (1, 8, 32), "video": (1,)}
QUICK_BATCHES = {"image": (1, 8), "video": (1,)}
SMOKE_BATCHES = {"image": (1, 2), "video": (1, 2)}
# Timed rounds (after the warm-up rounds) per (model, batch): ViT-L at batch 32 is ~100 s a round here.
ROUNDS = {("vit-s16", 1): 11, ("vit-s16", 8): 7, ("vit-s16", 32): 5, ("vit-l16", 1): 7, ("vit-l16", 8): 4,
          ("vit-l16", 32): 3, ("vjepa2-l16", 1): 3}
QUICK_ROUNDS = 3
SMOKE_ROUNDS = 2
# Untimed rounds first: torch's first calls at a new shape run slow for a while, ORT and OpenVINO
# allocate on their first run, ggml allocates its graph.
WARMUP = {"vit-s16": 2, "vit-l16": 1, "vjepa2-l16": 1}

# name -> (precision class, what it is)
VARIANTS: dict[str, tuple[str, str]] = {
    "torch-f32": ("exact", "transformers model, PyTorch eager (sdpa attention), torch.inference_mode(), "
                  "torch.set_num_threads(threads); the reference of every error figure"),
    "ort-f32": ("exact", "onnxruntime InferenceSession on the exported ONNX, CPUExecutionProvider, "
                "intra_op_num_threads=threads, inter_op_num_threads=1, ORT_ENABLE_ALL"),
    "ov-f32": ("exact", "openvino Core().compile_model on the exported ONNX reshaped to the cell's batch "
               "(static shape), CPU, INFERENCE_NUM_THREADS=threads, INFERENCE_PRECISION_HINT f32, "
               "PERFORMANCE_HINT LATENCY"),
    "jepa-f32": ("exact", "jepa-convert --ftype f32, model.context(threads=threads) (the engine's default "
                 "attention: flash)"),
    "ov-bf16": ("half", "as ov-f32 with INFERENCE_PRECISION_HINT bf16"),
    "jepa-bf16": ("half", "jepa-convert --ftype bf16: attention/FFN matrices bfloat16 (norms, biases, "
                  "tokens, patch embedding f32)"),
    "jepa-f16": ("half", "jepa-convert --ftype f16: the same matrices IEEE half"),
    "jepa-q8_0": ("quant", "jepa-quantize --type q8_0 of the f32 file: the same matrices 8-bit blocks of "
                  "32, run by the engine's int8 product (activations quantized per row and block of 32, "
                  "VNNI / AVX2 / NEON dots; rows no block divides stay f32)"),
    "ort-int8": ("quant", "onnxruntime.quantization.quantize_dynamic of the exported ONNX: MatMul / Gemm "
                 "weights QInt8 per channel, activations quantized per tensor at run time (MLAS u8s8: "
                 "VNNI where the CPU has it; on AVX2 without VNNI ORT warns of VPMADDUBSW saturation and "
                 "suggests reduce_range), same session options as ort-f32"),
    "ov-int8w": ("quant", "nncf.compress_weights(INT8_ASYM) of the OpenVINO model: int8 weights per "
                 "channel, decompressed in the kernels, activations f32 (INFERENCE_PRECISION_HINT f32)"),
    "ov-int8": ("quant", "nncf.quantize of the OpenVINO model (ModelType.TRANSFORMER, 8 random calibration "
                "images of the model's shape): int8 weights and activations, int8 compute (AMX / VNNI "
                "where the CPU has it), the rest f32 (INFERENCE_PRECISION_HINT f32)"),
    "jepa-q4_k": ("quant", "jepa-quantize --type q4_k of the f32 file: 4-bit k-quant blocks of 256 (rows "
                  "they cannot take: q4_0)"),
    "jepa-i8c": ("quant", "jepa-quantize --type i8c of the f32 file: the same matrices int8 with one f32 "
                 "scale per output channel, run by the engine's i8c product (activations quantized per "
                 "row, one exact int32 sum over the whole of k: AMX tiles / VNNI / AVX2 / NEON dots)"),
}
REF = "torch-f32"
CLASSES = {"exact": "f32", "half": "bf16"}  # the GEMM peak each class is measured against (quant: none)
# made from the f32 file by jepa-quantize
QUANT = {"jepa-q8_0": "q8_0", "jepa-q4_k": "q4_k", "jepa-i8c": "i8c"}


@dataclass(frozen=True)
class Ratio:
    """peer / jepa per round (the faster peer of the round when there are two), median over rounds."""

    key: str
    jepa: str
    peers: tuple[str, ...]
    goal: float | None = None  # None: the torch goals by batch (TORCH_GOAL)
    report_only: bool = False  # a figure to report, with no goal (the quantized rows)


RATIOS = (
    Ratio("f32_vs_exact_peer", "jepa-f32", ("ort-f32", "ov-f32"), 1.0),
    Ratio("bf16_vs_ov_bf16", "jepa-bf16", ("ov-bf16",), 1.0),
    Ratio("f16_vs_ov_bf16", "jepa-f16", ("ov-bf16",), 1.0),
    Ratio("f32_vs_torch", "jepa-f32", ("torch-f32",)),
    Ratio("bf16_vs_torch", "jepa-bf16", ("torch-f32",)),
    Ratio("f16_vs_torch", "jepa-f16", ("torch-f32",)),
    # Issue 23's goals for the engine's int8 product: 1.5x its own f32 (batch 1 and 8), and at least
    # the faster int8 peer.
    Ratio("q8_0_vs_jepa_f32", "jepa-q8_0", ("jepa-f32",), 1.5),
    Ratio("q8_0_vs_int8_peer", "jepa-q8_0", ("ort-int8", "ov-int8w", "ov-int8"), 1.0),
    Ratio("q4_k_vs_jepa_f32", "jepa-q4_k", ("jepa-f32",), report_only=True),
    # Issue 35's goals for i8c: at least the faster int8 peer, and 1.5x jepa's own f32 where the CPU
    # has VNNI or AMX (on AVX2 alone VPMADDUBSW runs at the FMA's rate: a figure, no goal).
    Ratio("i8c_vs_int8_peer", "jepa-i8c", ("ort-int8", "ov-int8w", "ov-int8"), 1.0),
    Ratio("i8c_vs_jepa_f32", "jepa-i8c", ("jepa-f32",), 1.5),
)
# The first goal against PyTorch eager, per batch size.
TORCH_GOAL = {1: 1.5, 8: 1.2, 32: 1.2}


# ---- every engine's copy of one model --------------------------------------------------------------------


@dataclass
class Engines:
    """One model built once for all its cells: the torch module, jepa's models and contexts, the ONNX
    Runtime sessions, the OpenVINO core and int8 models, and what the record says of them."""

    spec: Spec
    threads: int
    tforward: Any
    jm: dict[str, Any]
    ctxs: dict[str, Any]
    sessions: dict[str, Any]
    core: Any
    onnx_path: Path | None
    ov_int8: dict[str, Any]
    info: dict[str, Any]
    compiled_kernels: dict[str, Any] = field(default_factory=dict)


def jepa_files(tmodel: Any, workdir: Path, only: tuple[str, ...]) -> dict[str, str]:
    """The model saved and converted to f32, bf16 and f16 GGUFs, and quantized (the q rows asked for)."""
    from jepa.convert import convert
    from jepa.convert.quantize import quantize

    src = workdir / "hf"
    tmodel.save_pretrained(src)
    files = {ft: convert(src, workdir / f"{ft}.gguf", ftype=ft) for ft in ("f32", "bf16", "f16")}
    shutil.rmtree(src)
    for variant, qt in QUANT.items():
        if variant in only:
            files[qt] = str(workdir / f"{qt}.gguf")
            quantize(files["f32"], files[qt], qt)
    return files


def ov_int8_models(core: Any, onnx_path: Path, spec: Spec, seed: int,
                   only: tuple[str, ...]) -> dict[str, Any]:
    """OpenVINO's int8 rows from NNCF: weight compression (ov-int8w) and full quantization (ov-int8)
    with a few random calibration images; only those asked for."""
    want = [k for k in ("ov-int8w", "ov-int8") if k in only]
    if not want:
        return {}
    import nncf

    base = core.read_model(str(onnx_path))
    out: dict[str, Any] = {}
    if "ov-int8w" in want:
        out["ov-int8w"] = nncf.compress_weights(base.clone(), mode=nncf.CompressWeightsMode.INT8_ASYM)
    if "ov-int8" in want:
        rng = np.random.default_rng(seed + 1)
        shape = spec.input_shape(1)
        calib = [hf_layout(spec, rng.standard_normal(shape, dtype=np.float32)) for _ in range(8)]
        out["ov-int8"] = nncf.quantize(
            base.clone(), nncf.Dataset(calib), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calib)
        )
    return out


def jepa_kernels(model: Any) -> dict[str, Any]:
    """What the engine says about its kernel paths (jepa.ModelInfo's backend and matmul fields)."""
    info = model.info
    return {"backend": info.backend, "matmul": info.matmul, "n_matmul_packed": info.n_matmul_packed}


def build(name: str, spec: Spec, threads: int, workdir: Path, seed: int, only: tuple[str, ...]) -> Engines:
    """Every engine's copy of the model: built, converted, exported, loaded."""
    import openvino as ov
    import torch

    import jepa

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    tmodel = build_torch(spec, seed)
    files = jepa_files(tmodel, workdir, only)
    t_conv = time.perf_counter() - t0
    onnx_path = workdir / "model.onnx"
    exported = export(tmodel, spec, onnx_path) if any(v.startswith(("ort", "ov")) for v in only) else {}
    harness.log(f"[{name}] built and converted in {t_conv:.0f} s, exported ({exported.get('exporter')}) in "
                f"{time.perf_counter() - t0 - t_conv:.0f} s")
    ok = exported.get("exporter") is not None
    jm = {f"jepa-{ft}": jepa.Model(path) for ft, path in files.items()}
    sessions = {}
    if ok and "ort-f32" in only:
        sessions["ort-f32"] = peers.ort_session(onnx_path, threads)
    if ok and "ort-int8" in only:
        int8 = peers.ort_int8(onnx_path, workdir / "model-int8.onnx")
        sessions["ort-int8"] = peers.ort_session(int8, threads)
    core = ov.Core()
    info: dict[str, Any] = {
        "spec": asdict(spec),
        "tokens": spec.tokens,
        "gflop_per_item": round(spec.flops() / 1e9, 3),
        "export": exported,
        "jepa_kernels": {k: jepa_kernels(m) for k, m in jm.items()},
        "file_mb": {f"jepa-{ft}": round(Path(p).stat().st_size / 1e6, 1) for ft, p in files.items()},
        "ov_kernels": {},
    }
    ctxs = {k: m.context(threads=threads) for k, m in jm.items() if k in only}
    int8 = ov_int8_models(core, onnx_path, spec, seed, only) if ok else {}
    return Engines(spec, threads, last_hidden(tmodel, spec.kind), jm, ctxs, sessions, core,
                   onnx_path if ok else None, int8, info)


def compile_ov(e: Engines, shape: tuple[int, ...], only: tuple[str, ...]) -> dict[str, Any]:
    """OpenVINO's variants of the cell, compiled at its static shape."""
    compiled = {}
    if e.onnx_path is None:
        return compiled
    for prec in ("f32", "bf16"):
        if f"ov-{prec}" not in only:
            continue
        try:
            compiled[f"ov-{prec}"] = peers.ov_compile(e.core, e.onnx_path, shape, prec, e.threads)
        except RuntimeError as exc:
            # With oneDNN capped below bf16 (ONEDNN_MAX_CPU_ISA) on a CPU that has it, OpenVINO takes
            # the bf16 hint (it reads the CPU itself) and then finds no capped primitive for it.
            if "ONEDNN_MAX_CPU_ISA" not in os.environ or prec != "bf16":
                raise
            e.info.setdefault("ov_errors", {})[f"ov-{prec}"] = str(exc).strip().splitlines()[-1]
    for k, om in e.ov_int8.items():
        compiled[k] = peers.ov_compile(e.core, om, shape, "f32", e.threads)
    return compiled


def runs_for(e: Engines, x: np.ndarray, compiled: dict[str, Any],
             only: tuple[str, ...]) -> dict[str, Callable[[], Any]]:
    """Each variant's call on the cell's input, in VARIANTS' order."""
    import torch

    xh = hf_layout(e.spec, x)

    def torch_run() -> np.ndarray:
        with torch.inference_mode():
            return e.tforward(torch.from_numpy(xh)).numpy()

    runs: dict[str, Callable[[], Any]] = {}
    if REF in only:
        runs[REF] = torch_run
    for k, s in e.sessions.items():
        runs[k] = lambda s=s: s.run(None, {"x": xh})[0]
    for k, cm in compiled.items():
        req = cm.create_infer_request()
        runs[k] = lambda req=req: req.infer({0: xh}, share_inputs=True)[0]
    for k, c in e.ctxs.items():
        runs[k] = lambda c=c: c.encode(x)
    return {k: runs[k] for k in VARIANTS if k in runs}


# ---- one cell ------------------------------------------------------------------------------------------


def bit_identical(run: Callable[[np.ndarray], np.ndarray], x: np.ndarray, batched: np.ndarray) -> bool:
    """Items of a batched call equal (bit for bit) the same items encoded alone (first, middle, last)."""
    b = x.shape[0]
    for i in sorted({0, b // 2, b - 1}):
        alone = run(x[i : i + 1])
        if alone[0].view(np.uint32).tobytes() != batched[i].view(np.uint32).tobytes():
            return False
    return True


def _pooled_cos(got: np.ndarray, ref: np.ndarray, prefix: int) -> float:
    a = got[:, prefix:].astype(np.float64).mean(1)
    b = ref[:, prefix:].astype(np.float64).mean(1)
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return float(cos.min())


def peak_share(gflops: float, pk: dict[str, Any], variant: str) -> float | None:
    """The share of its precision class's GEMM peak a variant reached."""
    cls = CLASSES.get(VARIANTS[variant][0])  # quantized rows have no GEMM peak of their own
    peak = pk.get(f"{cls}_gflops") if cls else None
    return None if not peak else round(gflops / peak, 3)


def checks(e: Engines, x: np.ndarray, outputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """Every variant's tokens against torch's, and jepa's promises: a batch gives each item the bits it
    gets alone, whatever the thread count."""
    ref = outputs.get(REF)
    rel, cos = {}, {}
    if ref is not None:
        scale = float(np.abs(ref).max())
        for k, out in outputs.items():
            if k != REF:
                rel[k] = harness.sig(float(np.abs(out - ref).max()) / scale)
                cos[k] = _pooled_cos(out, ref, e.spec.prefix)
    b = x.shape[0]
    batch = {k: None if b == 1 else bit_identical(c.encode, x, outputs[k]) for k, c in e.ctxs.items()}
    threads, k1 = {}, min(b, 2)
    for k, c in e.ctxs.items():
        one = e.jm[k].context(threads=1).encode(x[:k1])
        two = c.encode(x[:k1]) if e.threads == 2 else e.jm[k].context(threads=2).encode(x[:k1])
        threads[k] = one.view(np.uint32).tobytes() == two.view(np.uint32).tobytes()
    return {"max_rel_diff_vs_torch": rel, "pooled_cos_vs_torch": cos, "batch_bit_identical": batch,
            "threads_1_2_bit_identical": threads}


def cell(name: str, e: Engines, b: int, rounds: int, warmup: int, x: np.ndarray, pk: dict[str, Any],
         only: tuple[str, ...]) -> dict[str, Any]:
    """One (model, batch): the variants interleaved, their figures, the checks."""
    compiled = compile_ov(e, hf_layout(e.spec, x).shape, only)
    runs = runs_for(e, x, compiled, only)
    with harness.Load() as load:
        got = harness.interleave(runs, rounds, warmup)
    for k, cm in compiled.items():
        e.info["ov_kernels"].setdefault(k, peers.ov_kernels(cm))
    del compiled, runs
    samples = {k: [1000.0 * s / b for s in v] for k, v in got.samples.items()}
    ms = harness.Rounds(samples, {}).medians()
    gflops = {k: e.spec.flops() / (v / 1000.0) / 1e9 for k, v in ms.items()}
    ratios = {r.key: harness.paired(samples, r.peers, r.jepa) for r in RATIOS}
    exact = [p for p in ("ort-f32", "ov-f32") if p in ms]
    out = {
        "model": name, "batch": b, "measured_at": time.strftime(harness.ISO), "rounds": rounds,
        "warmup_rounds": warmup,
        "ms_per_img": {k: round(v, 2) for k, v in ms.items()},
        "gflops": {k: round(v, 1) for k, v in gflops.items()},
        "peak_share": {k: peak_share(g, pk, k) for k, g in gflops.items()},
        "ratios": {k: (None if v is None else round(v, 3)) for k, v in ratios.items()},
        "goals": {r.key: (None if r.report_only else r.goal if r.goal is not None else TORCH_GOAL.get(b))
                  for r in RATIOS},
        "faster_exact_peer": min(exact, key=lambda p: ms[p]) if exact else None,
        **checks(e, x, {k: np.asarray(v) for k, v in got.outputs.items()}),
        "samples_ms_per_img": {k: [round(s, 2) for s in v] for k, v in samples.items()},
        **load.record(),
    }
    summary = "  ".join(f"{k}={v:.1f}" for k, v in ms.items())
    harness.log(f"[{name} b{b}] ms/item {summary}  ({load.seconds:.0f} s, load {load.load_avg[0]:.1f}, "
                f"others {100 * out['others_cpu_share']:.0f}%)")
    return out


def run_model(name: str, spec: Spec, batches: tuple[int, ...], threads: int,
              rounds_for: Callable[[str, int], int], warmup: int, workdir: Path, seed: int,
              pk: dict[str, Any], only: tuple[str, ...]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every cell of one model, and what the record says of the model."""
    e = build(name, spec, threads, workdir, seed, only)
    rng = np.random.default_rng(seed)
    cells = [cell(name, e, b, rounds_for(name, b), warmup, rng.standard_normal(spec.input_shape(b),
                                                                              dtype=np.float32), pk, only)
             for b in batches]
    return cells, e.info


# ---- the run -------------------------------------------------------------------------------------------


def summarise(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell and ratio: the value, its goal and whether it is met."""
    out = []
    for c in cells:
        for key, v in c["ratios"].items():
            goal = c["goals"].get(key)
            out.append({"model": c["model"], "batch": c["batch"], "ratio": key, "value": v, "goal": goal,
                        "meets_goal": None if v is None or goal is None else v >= goal})
    return out


def options() -> Any:
    p = harness.parser(__doc__, smoke="tiny models, every variant, 2 rounds (a test)",
                       quick="ViT-S only, batch 1 and 8, few rounds", threads=min(2, os.cpu_count() or 1))
    p.add_argument("--models", default=None, help="comma-separated subset of " + ",".join(MODELS))
    p.add_argument("--batches", default=None, help="comma-separated batch sizes of the image models "
                   "(default 1,8,32; the video encoder always runs one clip)")
    p.add_argument("--variants", default=None, help="comma-separated subset of " + ",".join(VARIANTS))
    p.add_argument("--rounds", type=int, default=None,
                   help="timed rounds per cell (default: by model and batch)")
    p.add_argument("--peak-n", type=int, default=None,
                   help=f"GEMM size of the peak measurement ({peaks.PEAK_N})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--note", default="", help="free text stored in the JSON")
    p.add_argument("--update", action="store_true",
                   help="keep the other cells of an existing --out file (re-measure one model or batch size)")
    return p


@dataclass
class Plan:
    """What the command line asks: the models, the variants, batches and rounds."""

    table: dict[str, Spec]
    models: list[str]
    only: tuple[str, ...]
    args: Any

    def batches(self, spec: Spec) -> tuple[int, ...]:
        if self.args.batches and spec.kind == "image":
            return tuple(int(b) for b in self.args.batches.split(","))
        table = SMOKE_BATCHES if self.args.smoke else QUICK_BATCHES if self.args.quick else BATCHES
        return table[spec.kind]

    def rounds(self, model: str, batch: int) -> int:
        if self.args.rounds:
            return int(self.args.rounds)
        if self.args.smoke:
            return SMOKE_ROUNDS
        return QUICK_ROUNDS if self.args.quick else ROUNDS.get((model, batch), 3)

    def warmup(self, model: str) -> int:
        return 1 if self.args.smoke else WARMUP.get(model, 1)


def plan(p: Any, args: Any) -> Plan:
    table = SMOKE_MODELS if args.smoke else MODELS
    models = args.models.split(",") if args.models else ["vit-s16"] if args.quick else list(table)
    unknown = [m for m in models if m not in table]
    if unknown:
        p.error(f"unknown model(s): {', '.join(unknown)} (known: {', '.join(table)})")
    only = tuple(args.variants.split(",")) if args.variants else tuple(VARIANTS)
    bad = [v for v in only if v not in VARIANTS]
    if bad:
        p.error(f"unknown variant(s): {', '.join(bad)}")
    return Plan(table, models, only, args)


def merge(out: Path, data: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """--update: the cells of an existing record that this run did not measure, kept."""
    if not out.is_file():
        return data
    old = json.loads(out.read_text())
    if old.get("schema") != SCHEMA:
        harness.log(f"--update: {out} has schema {old.get('schema', 1)}, not {SCHEMA}; replacing it")
        return data
    done = {(c["model"], c["batch"]) for c in data["cells"]}
    kept = [c for c in old["cells"] if (c["model"], c["batch"]) not in done]
    cells = sorted(kept + data["cells"], key=lambda c: (order.index(c["model"]), c["batch"]))
    models = {k: v for k, v in old.get("models", {}).items() if k not in data["models"]} | data["models"]
    started = min(data["started"], old["started"]) if kept else data["started"]
    seconds = data["seconds"] + sum(c["seconds"] for c in kept)
    return {**data, "started": started, "seconds": round(seconds, 1), "models": models, "cells": cells,
            "summary": summarise(cells)}


def main(argv: list[str] | None = None) -> int:
    p = options()
    args = harness.parse(p, argv)
    pl = plan(p, args)
    peak_n = args.peak_n or (256 if args.smoke else peaks.PEAK_N)
    out = harness.out_path(args, "bench-engine")
    run = harness.Run("bench-engine", args.threads, args.smoke, args.quick,
                      ("torch", "transformers", "onnx", "onnxruntime", "openvino", "nncf"))
    peak_runs = [peaks.measure(args.threads, peak_n)]
    harness.log(f"GEMM peaks (before): { {k: v.get('gflops') for k, v in peak_runs[0].items()} }")
    pk = peaks.summary(peak_runs, peak_n, args.threads)
    cells: list[dict[str, Any]] = []
    model_infos: dict[str, Any] = {}
    for m in pl.models:
        with tempfile.TemporaryDirectory(prefix=f"jepa-bench-{m}-") as tmp:
            c, info = run_model(m, pl.table[m], pl.batches(pl.table[m]), args.threads, pl.rounds,
                                pl.warmup(m), Path(tmp), args.seed, pk, pl.only)
        cells += c
        model_infos[m] = info
        gc.collect()
    peak_runs.append(peaks.measure(args.threads, peak_n))
    harness.log(f"GEMM peaks (after): { {k: v.get('gflops') for k, v in peak_runs[1].items()} }")
    pk = peaks.summary(peak_runs, peak_n, args.threads)
    # The shares were computed against the peaks before the cells; recompute against the best of both.
    for c in cells:
        c["peak_share"] = {k: peak_share(g, pk, k) for k, g in c["gflops"].items()}
    data = {
        **run.head(),
        "schema": SCHEMA,
        "description": "jepa (ggml) vs ONNX Runtime, OpenVINO and PyTorch eager on the same transformers "
        "models and weights, same inputs and threads; interleaved rounds, warm-up dropped, medians; "
        "ratio = peer / jepa (> 1: jepa faster), paired within rounds",
        "note": args.note,
        "kernels": peers.kernels_info(),
        "peaks": pk,
        "variants": {k: {"class": c, "what": w} for k, (c, w) in VARIANTS.items() if k in pl.only},
        "ratios": {r.key: {"jepa": r.jepa, "peers": list(r.peers),
                           "goal": None if r.report_only else r.goal if r.goal is not None else TORCH_GOAL}
                   for r in RATIOS},
        "flops": "per item: 2 x patches x (3 x tubelet x patch^2) x D + layers x (2 N (4 D^2 + 2 D F) + "
        "4 N^2 D), N = tokens incl. CLS",
        "models": model_infos,
        "cells": cells,
        "summary": summarise(cells),
    }
    if args.update:
        data = merge(out, data, list(pl.table))
    harness.write_record(out, data)
    harness.log(f"wrote {out} ({data['seconds'] / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
