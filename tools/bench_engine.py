#!/usr/bin/env python3
"""jepa against ONNX Runtime, OpenVINO and PyTorch on the same ViTs, weights, inputs and threads
-> tests/results/bench-engine.json.

For each model (ViT-S/16 and ViT-L/16 at 224, the V-JEPA 2 ViT-L/16 video encoder on one 16-frame
256 px clip; random weights) the transformers model (ViTModel / VJEPA2Model) is built once and
  - saved with save_pretrained and converted by jepa-convert to f32, bf16 and f16 GGUF files;
  - exported once with torch.onnx.export (f32, dynamic batch axis) for the ONNX peers;
so every engine runs the same network and weights. Variants, in two precision classes:

  exact: torch-f32 (eager), ort-f32 (ONNX Runtime, CPU EP), ov-f32 (OpenVINO), jepa-f32
  half:  ov-bf16 (OpenVINO, INFERENCE_PRECISION_HINT bf16), jepa-bf16, jepa-f16

For each batch size the variants run interleaved (the order rotates every round), the first rounds
are a warm-up and are dropped, and the median of the rest is reported as ms per item. Ratios are
peer / jepa (above 1, jepa is faster), each the median over rounds of the ratio within a round:
jepa-f32 against the faster of ort-f32 / ov-f32, jepa-bf16 and jepa-f16 against ov-bf16, and every
jepa variant against torch. Each cell also records GFLOP/s (the model's FLOPs counted analytically),
the share of the machine's GEMM peak for the variant's class (measured in the same run: f32 through
OpenBLAS, MLAS and MKL, bf16 through oneDNN), every variant's tokens against torch f32 (max|Δ| /
max|ref|, pooled-mean cosine), and for jepa batch bit-identity and threads-1 = threads-2 identity.

    python tools/bench_engine.py --threads 2            # the full run (~30 min on 2 cores)
    python tools/bench_engine.py --quick                # ViT-S, batch 1 and 8, few rounds (~3 min)
    python tools/bench_engine.py --smoke --threads 1    # tiny models, every variant (a test runs it)
    python tools/bench_engine.py --models vjepa2-l16 --update   # re-measure one model, keep the rest
    python tools/bench_engine.py --isa avx2     # every engine held to AVX2 as far as it can be
                                                # -> tests/results/bench-engine-avx2.json

--isa avx2 measures the AVX2 class on a CPU that has more: jepa on JEPA_GEMM=avx2, OpenVINO and
PyTorch's oneDNN on ONEDNN_MAX_CPU_ISA=AVX2, PyTorch's MKL on MKL_ENABLE_INSTRUCTIONS=AVX2, the
OpenBLAS peak on OPENBLAS_CORETYPE=Haswell. ONNX Runtime has no such switch (MLAS picks its kernels
by CPUID), so on an AVX-512 CPU its figures are its AVX-512 ones: the JSON's "isa" block says so.

A benchmark, not a test: the numbers depend on the machine and on what else runs on it (the share of
the CPUs other processes took during each cell, and the load average around it, are recorded)."""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# numpy's own OpenBLAS threads spin after start-up and steal cycles from the engines; none needs them.
# (The f32 GEMM peak runs OpenBLAS in a child process with its own thread count.)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "results" / "bench-engine.json"
AVX2_OUT = ROOT / "tests" / "results" / "bench-engine-avx2.json"
# --isa avx2: each engine's own switch to hold it to AVX2 (set before any of them is imported).
AVX2_ENV = {"JEPA_GEMM": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "ATEN_CPU_CAPABILITY": "avx2"}
# Quick and smoke runs never replace the committed results unless --out says so.
QUICK_OUT = Path(tempfile.gettempdir()) / "bench-engine-quick.json"
SMOKE_OUT = Path(tempfile.gettempdir()) / "bench-engine-smoke.json"
SCHEMA = 2  # the JSON's shape; tools/render_docs.py renders 1 (jepa vs torch only) and 2


@dataclass(frozen=True)
class Spec:
    """One model: a transformers ViTModel ("image") or VJEPA2Model encoder ("video") at these dims."""

    kind: str
    label: str
    hidden: int
    layers: int
    heads: int
    ffn: int
    img: int
    patch: int = 16
    frames: int = 1
    tubelet: int = 1

    @property
    def patches(self) -> int:
        return (self.frames // self.tubelet) * (self.img // self.patch) ** 2

    @property
    def tokens(self) -> int:
        """N: the sequence the blocks run on (a ViT has a CLS token, the V-JEPA 2 encoder none)."""
        return self.patches + (1 if self.kind == "image" else 0)

    @property
    def prefix(self) -> int:
        return self.tokens - self.patches

    def flops(self) -> float:
        """Multiply-adds x 2 per item: patch embedding, per layer the four attention and two FFN
        matrices (2 N (4 D^2 + 2 D F)) and the two attention products (4 N^2 D). Norms, softmax,
        GELU and adds are left out (well under 1 %)."""
        n, d, f = self.tokens, self.hidden, self.ffn
        embed = 2.0 * self.patches * (3 * self.tubelet * self.patch**2) * d
        return embed + self.layers * (2.0 * n * (4 * d * d + 2 * d * f) + 4.0 * n * n * d)

    def input_shape(self, b: int) -> tuple[int, ...]:
        """jepa's layout: images [B, C, H, W], clips [B, C, T, H, W]."""
        if self.kind == "image":
            return (b, 3, self.img, self.img)
        return (b, 3, self.frames, self.img, self.img)


MODELS: dict[str, Spec] = {
    "vit-s16": Spec("image", "ViT-S/16", 384, 12, 6, 1536, 224),
    "vit-l16": Spec("image", "ViT-L/16", 1024, 24, 16, 4096, 224),
    "vjepa2-l16": Spec("video", "V-JEPA 2 ViT-L/16, 16 × 256²", 1024, 24, 16, 4096, 256, frames=16,
                       tubelet=2),
}
# --smoke: the same two kinds, tiny, so every variant runs end to end in seconds.
SMOKE_MODELS: dict[str, Spec] = {
    "vit-tiny": Spec("image", "ViT tiny (smoke)", 64, 2, 4, 128, 32),
    "vjepa2-tiny": Spec("video", "V-JEPA 2 tiny (smoke)", 64, 2, 4, 256, 32, frames=4, tubelet=2),
}
BATCHES = {"image": (1, 8, 32), "video": (1,)}
QUICK_BATCHES = {"image": (1, 8), "video": (1,)}
SMOKE_BATCHES = {"image": (1, 2), "video": (1, 2)}
# Timed rounds (after the warm-up rounds) per (model, batch): ViT-L at batch 32 is ~100 s a round here.
ROUNDS = {
    ("vit-s16", 1): 11,
    ("vit-s16", 8): 7,
    ("vit-s16", 32): 5,
    ("vit-l16", 1): 7,
    ("vit-l16", 8): 4,
    ("vit-l16", 32): 3,
    ("vjepa2-l16", 1): 3,
}
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
}
REF = "torch-f32"
JEPA = ("jepa-f32", "jepa-bf16", "jepa-f16", "jepa-q8_0", "jepa-q4_k")
CLASSES = {"exact": "f32", "half": "bf16"}  # the GEMM peak each class is measured against (quant: none)
QUANT = {"jepa-q8_0": "q8_0", "jepa-q4_k": "q4_k"}  # made from the f32 file by jepa-quantize


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
)
# The first goal against PyTorch eager, per batch size.
TORCH_GOAL = {1: 1.5, 8: 1.2, 32: 1.2}

OPSET = 18
# torch.onnx.export's two exporters, tried in this order. The TorchScript exporter comes first: ONNX
# Runtime's graph optimizer fuses its attention / LayerNorm / GELU patterns (ViT-S ran ~1.3x faster in
# ORT from it than from the dynamo export here); dynamo is the fallback and the future default.
EXPORTERS = ("torchscript", "dynamo")
PEAK_N = 2048
PEAK_REPS = 7


@dataclass
class Variant:
    name: str
    run: Callable[[], np.ndarray]


# --------------------------------------------------------------------------------------------------
# The machine


def machine_info(threads: int) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("", platform.machine()):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    simd = {"avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni",
            "amx_tile", "amx_bf16", "amx_int8"}
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": threads,
        "simd": sorted(f for f in flags if f in simd),
        "flags": sorted(flags),
        "os": platform.platform(),
        "env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS",
                                                "OMP_WAIT_POLICY", "ONEDNN_MAX_CPU_ISA",
                                                "MKL_ENABLE_INSTRUCTIONS", "JEPA_GEMM")},
        "shared": "yes: other jobs may run; runs are interleaved and medians taken",
    }


def write_record(out: Path, data: dict[str, Any], indent: int = 1) -> None:
    """A benchmark's JSON record to `out` (its folder made if missing), newline-terminated."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=indent) + "\n")


def git_commit() -> str:
    """HEAD, with '+dirty' when the engine's sources (csrc/, python/) differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "csrc", "python"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def versions_of(*modules: str) -> dict[str, str]:
    """jepa's and ggml's versions, each named module's __version__ (keyed by its import name), numpy's:
    the versions block of the benchmarks' run records."""
    import importlib

    import jepa

    return {
        "jepa": jepa.__version__,
        "ggml": jepa._engine.ggml_version(),
        **{m: importlib.import_module(m).__version__ for m in modules},
        "numpy": np.__version__,
    }


def versions() -> dict[str, str]:
    return {
        **versions_of("torch", "transformers", "onnx", "onnxruntime", "openvino", "nncf"),
        "python": platform.python_version(),
    }


def machine_busy_s() -> float:
    """CPU-seconds all processes on the machine have used since boot (/proc/stat; 0 where absent)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def self_busy_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# --------------------------------------------------------------------------------------------------
# GEMM peaks: the best GFLOP/s of an n^3 product, f32 (OpenBLAS through numpy, MLAS through ONNX
# Runtime, MKL through torch) and bf16 (oneDNN through torch), at the benchmark's thread count.


def _best_gflops(fn: Callable[[], Any], n: int, reps: int) -> float:
    fn()  # warm-up: thread pools, packing buffers
    best = min(_timed(fn) for _ in range(reps))
    return 2.0 * n**3 / best / 1e9


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _openblas_info() -> dict[str, str]:
    """The OpenBLAS core numpy runs (threadpoolctl when installed, else the same calls by ctypes)."""
    try:
        from threadpoolctl import threadpool_info

        for lib in threadpool_info():
            if lib.get("internal_api") == "openblas":
                return {"corename": str(lib.get("architecture")), "version": str(lib.get("version")),
                        "via": "threadpoolctl"}
    except ImportError:
        pass
    import ctypes

    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if "openblas" not in Path(path).name.lower() or ".so" not in path:
            continue
        lib = ctypes.CDLL(path)
        out = {"via": "ctypes, as threadpoolctl does (threadpoolctl is not installed)", "library": path}
        for key, names in (
            ("corename", ("scipy_openblas_get_corename64_", "openblas_get_corename64_",
                          "openblas_get_corename")),
            ("config", ("scipy_openblas_get_config64_", "openblas_get_config64_", "openblas_get_config")),
        ):
            for sym in names:
                f = getattr(lib, sym, None)
                if f is not None:
                    f.restype = ctypes.c_char_p
                    out[key] = f().decode()
                    break
        return out
    return {"corename": "unknown"}


def _peak_worker(kind: str, n: int, threads: int) -> dict[str, Any]:
    """Run in a child process (its own env): one engine's GEMM peak."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    if kind == "openblas-f32":
        return {"gflops": _best_gflops(lambda: a @ b, n, PEAK_REPS), "openblas": _openblas_info()}
    import torch

    torch.set_num_threads(threads)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    if kind == "torch-bf16":
        ta, tb = ta.to(torch.bfloat16), tb.to(torch.bfloat16)
    with torch.inference_mode():
        g = _best_gflops(lambda: torch.matmul(ta, tb), n, PEAK_REPS)
    return {"gflops": g, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def _run_peak_child(kind: str, n: int, threads: int, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--peak-worker", kind, "--peak-n", str(n),
           "--threads", str(threads)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode:
        return {"error": r.stderr.strip()[-500:]}
    lines = r.stdout.splitlines()
    out: dict[str, Any] = json.loads(next(ln for ln in reversed(lines) if ln.startswith("PEAK-JSON "))[10:])
    # The kernels the libraries picked, from their verbose modes.
    impls = sorted({ln.split(",")[ln.split(",").index("matmul") + 1] for ln in lines
                    if ln.startswith("onednn_verbose") and ",exec," in ln and ",matmul," in ln})
    if impls:
        out["onednn_impl"] = impls
    mkl = [ln for ln in lines if ln.startswith("MKL_VERBOSE") and "GEMM" not in ln]
    if mkl:
        out["mkl"] = mkl[0].removeprefix("MKL_VERBOSE ").strip()
    return out


def _ort_matmul_gflops(n: int, threads: int) -> float:
    """MLAS through an ONNX MatMul whose B is an initializer (ORT prepacks it, as it does weights)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"])], "gemm",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [n, n])],
        [numpy_helper.from_array(rng.standard_normal((n, n), dtype=np.float32), "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), _ort_options(threads),
                                providers=["CPUExecutionProvider"])
    return _best_gflops(lambda: sess.run(None, {"A": a}), n, PEAK_REPS)


def has_bf16_hardware() -> bool:
    """AVX512-BF16 or AMX-BF16 (as the engine sees the CPU: JEPA_CPU_FEATURES masks it), where oneDNN's
    bf16 products run in hardware (elsewhere torch's bf16 matmul is emulated: minutes for the peak's
    product)."""
    from bench import cpu

    return cpu.bf16() and os.environ.get("ONEDNN_MAX_CPU_ISA") != "AVX2"


def measure_peaks(threads: int, n: int, isa: str = "native") -> dict[str, Any]:
    """One measurement of every engine's GEMM peak at `threads` threads."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    # Some machines set these for the engines' sake; OpenBLAS's own choice of core is what numpy
    # users get, so they are unset for this measurement (and their values recorded in machine.env).
    # --isa avx2 holds it to its Haswell kernels instead.
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    if isa == "avx2":
        env["OPENBLAS_CORETYPE"] = "Haswell"
    out: dict[str, Any] = {"openblas-f32": _run_peak_child("openblas-f32", n, threads, env)}
    out["mlas-f32"] = {"gflops": _ort_matmul_gflops(n, threads)}
    verbose = dict(os.environ, ONEDNN_VERBOSE="1", MKL_VERBOSE="1")
    out["mkl-f32"] = _run_peak_child("torch-f32", n, threads, verbose)
    if has_bf16_hardware():
        out["onednn-bf16"] = _run_peak_child("torch-bf16", n, threads, verbose)
    else:
        out["onednn-bf16"] = {"skipped": "no bf16 hardware (or held to AVX2): torch's bf16 matmul would be "
                              "emulated, minutes per product"}
    for v in out.values():
        if "gflops" in v:
            v["gflops"] = round(v["gflops"], 1)
    return out


def peak_summary(runs: list[dict[str, Any]], n: int, threads: int, isa: str = "native") -> dict[str, Any]:
    """The class peaks: the best of every measurement (before and after the cells) of each precision.
    Held to AVX2, MLAS (which cannot be held) is measured and recorded but not the class's peak."""
    def best(prefixes: tuple[str, ...]) -> tuple[float | None, str | None]:
        got = [(r[k]["gflops"], k) for r in runs for k in r if k.startswith(prefixes) and "gflops" in r[k]]
        return max(got) if got else (None, None)

    held = ("openblas-f32", "mkl-f32")
    f32, f32_by = best(held if isa == "avx2" else (*held, "mlas-f32"))
    bf16, bf16_by = best(("onednn-bf16",))
    return {
        "n": n,
        "threads": threads,
        "f32_gflops": f32,
        "f32_by": f32_by,
        "bf16_gflops": bf16,
        "bf16_by": bf16_by,
        "runs": runs,
        "what": f"best GFLOP/s of a {n}^3 product over {PEAK_REPS} reps after a warm-up; f32: numpy "
        "(OpenBLAS, OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset, in a child process), ONNX Runtime MatMul "
        "(MLAS) and torch.matmul (MKL); bf16: torch.matmul on bf16 (oneDNN); measured before and after "
        "the cells, the best kept",
    }


# --------------------------------------------------------------------------------------------------
# Building every engine's copy of one model


def last_hidden(model: Any, kind: str) -> Any:
    """A module mapping the model's native input to its final-norm tokens [B, N, D]: what every engine
    returns, and what torch.onnx.export traces."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if kind == "image":
                return self.m(pixel_values=x).last_hidden_state
            return self.m(pixel_values_videos=x, skip_predictor=True).last_hidden_state

    return LastHidden().eval()


def build_torch(spec: Spec, seed: int) -> Any:
    """A random-weight transformers model with these dims (LayerNorms away from 1 / 0, as in the
    parity tests, so no engine can skip a norm)."""
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(seed)
    if spec.kind == "image":
        from transformers import ViTConfig, ViTModel

        model = ViTModel(
            ViTConfig(hidden_size=spec.hidden, num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
                      intermediate_size=spec.ffn, image_size=spec.img, patch_size=spec.patch),
            add_pooling_layer=False,
        )
    else:
        from transformers import VJEPA2Config, VJEPA2Model

        model = VJEPA2Model(
            VJEPA2Config(hidden_size=spec.hidden, num_hidden_layers=spec.layers,
                         num_attention_heads=spec.heads, mlp_ratio=spec.ffn / spec.hidden, crop_size=spec.img,
                         patch_size=spec.patch, tubelet_size=spec.tubelet, frames_per_clip=spec.frames,
                         pred_num_hidden_layers=1)
        )
    model.eval()
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.add_(0.1 * torch.randn(mod.weight.shape))
                mod.bias.add_(0.1 * torch.randn(mod.bias.shape))
    return model


def hf_layout(spec: Spec, x: np.ndarray) -> np.ndarray:
    """transformers' input layout: images as jepa's, clips [B, T, C, H, W]."""
    return x if spec.kind == "image" else np.ascontiguousarray(x.transpose(0, 2, 1, 3, 4))


def export_onnx(model: Any, spec: Spec, path: Path) -> dict[str, Any]:
    """torch.onnx.export with a dynamic batch axis, f32; each exporter in turn until one works.
    Returns what happened (the error of every exporter that failed, verbatim)."""
    import torch

    wrapped = last_hidden(model, spec.kind)
    example = torch.from_numpy(hf_layout(spec, np.zeros(spec.input_shape(2), np.float32)))
    attempts: dict[str, str] = {}
    for exporter in EXPORTERS:
        t0 = time.perf_counter()
        try:
            kw: dict[str, Any]
            if exporter == "dynamo":
                kw = {"dynamo": True, "dynamic_shapes": ({0: torch.export.Dim("batch", min=1, max=64)},)}
            else:
                kw = {"dynamo": False, "dynamic_axes": {"x": {0: "batch"}, "tokens": {0: "batch"}}}
            with torch.no_grad():
                torch.onnx.export(wrapped, (example,), str(path), input_names=["x"], output_names=["tokens"],
                                  opset_version=OPSET, **kw)
        except Exception as exc:  # the exporter's own error is the result to record
            attempts[exporter] = f"{type(exc).__name__}: {exc}"[:4000]
            print(f"  torch.onnx.export ({exporter}) failed: {attempts[exporter][:300]}", file=sys.stderr)
            continue
        attempts[exporter] = "ok"
        return {"exporter": exporter, "opset": OPSET, "seconds": round(time.perf_counter() - t0, 1),
                "attempts": attempts}
    return {"exporter": None, "opset": OPSET, "attempts": attempts}


def _ort_options(threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    return so


def ov_config(precision: str, threads: int) -> dict[str, Any]:
    return {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": precision,
            "PERFORMANCE_HINT": "LATENCY"}


def ov_compile(core: Any, model: Any, shape: tuple[int, ...], precision: str, threads: int) -> Any:
    """The ONNX file at `model` (a path), or an OpenVINO model already read (the NNCF ones: left as
    they are), reshaped to the cell's static shape and compiled for the CPU."""
    m = core.read_model(str(model)) if isinstance(model, Path) else model.clone()
    m.reshape(list(shape))
    return core.compile_model(m, "CPU", ov_config(precision, threads))


def ort_int8(onnx_path: Path, out: Path) -> Path:
    """ONNX Runtime's dynamic int8 of the exported model (the ort-int8 row): MatMul / Gemm weights
    signed 8-bit per output channel, activations quantized at run time."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(onnx_path, out, weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul", "Gemm"])
    return out


def ov_int8_models(
    core: Any, onnx_path: Path, spec: Spec, seed: int, only: tuple[str, ...]
) -> dict[str, Any]:
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


def ov_kernels(compiled: Any) -> dict[str, Any]:
    """The primitives OpenVINO's CPU plugin picked for the heavy layers (from the runtime model)."""
    heavy = {"FullyConnected", "MatMul", "Convolution", "ScaledDotProductAttention", "Subgraph", "MVN"}
    count: collections.Counter[str] = collections.Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layer = info["layerType"].astype(str) if "layerType" in info else ""
        if layer in heavy:
            prim = info["primitiveType"].astype(str) if "primitiveType" in info else "?"
            count[f"{layer}: {prim}"] += 1
    prec = compiled.get_property("INFERENCE_PRECISION_HINT")
    return {"inference_precision": prec.get_type_name() if hasattr(prec, "get_type_name") else str(prec),
            "threads": int(compiled.get_property("INFERENCE_NUM_THREADS")),
            "primitives": dict(sorted(count.items()))}


def jepa_kernels(model: Any) -> dict[str, Any]:
    """What the engine says about its kernel paths (jepa.ModelInfo's backend and matmul fields)."""
    info = model.info
    return {"backend": info.backend, "matmul": info.matmul, "n_matmul_packed": info.n_matmul_packed}


# --------------------------------------------------------------------------------------------------
# Timing and checks


def bit_identical(run: Callable[[np.ndarray], np.ndarray], x: np.ndarray, batched: np.ndarray) -> bool:
    """Items of a batched call equal (bit for bit) the same items encoded alone (first, middle, last)."""
    b = x.shape[0]
    for i in sorted({0, b // 2, b - 1}):
        alone = run(x[i : i + 1])
        if alone[0].view(np.uint32).tobytes() != batched[i].view(np.uint32).tobytes():
            return False
    return True


def time_cell(
    variants: list[Variant], b: int, rounds: int, warmup: int
) -> tuple[dict[str, list[float]], dict[str, np.ndarray]]:
    """Interleaved rounds, the first `warmup` untimed. Returns ms/item samples and one output per variant."""
    samples: dict[str, list[float]] = {v.name: [] for v in variants}
    outputs: dict[str, np.ndarray] = {}
    for r in range(warmup + rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for v in order:
            t0 = time.perf_counter()
            out = v.run()
            dt = time.perf_counter() - t0
            if r == 0:
                outputs[v.name] = np.asarray(out)
            if r >= warmup:
                samples[v.name].append(1000.0 * dt / b)
    return samples, outputs


def paired_ratio(samples: dict[str, list[float]], peers: tuple[str, ...], den: str) -> float | None:
    """Median over rounds of (the fastest of `peers` in that round) / samples[den]: the peers this run
    measured (None when it measured none). The variants of a round run back to back, so a burst of
    load from elsewhere mostly hits both sides of a pair."""
    present = [p for p in peers if p in samples]
    if den not in samples or not present:
        return None
    per_round = zip(*(samples[p] for p in present), samples[den], strict=True)
    return statistics.median(min(r[:-1]) / r[-1] for r in per_round)


def _pooled_cos(got: np.ndarray, ref: np.ndarray, prefix: int) -> float:
    a = got[:, prefix:].astype(np.float64).mean(1)
    b = ref[:, prefix:].astype(np.float64).mean(1)
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return float(cos.min())


def peak_share(gflops: float, peaks: dict[str, Any], variant: str) -> float | None:
    """The share of its precision class's GEMM peak a variant reached."""
    cls = CLASSES.get(VARIANTS[variant][0])  # quantized rows have no GEMM peak of their own
    peak = peaks.get(f"{cls}_gflops") if cls else None
    return None if not peak else round(gflops / peak, 3)


def _g(v: float) -> float:
    return float(f"{v:.3g}")


def run_model(
    name: str,
    spec: Spec,
    batches: tuple[int, ...],
    threads: int,
    rounds_for: Callable[[str, int], int],
    warmup: int,
    workdir: Path,
    seed: int,
    peaks: dict[str, Any],
    only: tuple[str, ...],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import onnxruntime as ort
    import openvino as ov
    import torch

    import jepa
    from jepa.convert import convert

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    tmodel = build_torch(spec, seed)
    src = workdir / "hf"
    tmodel.save_pretrained(src)
    files = {ft: convert(src, workdir / f"{ft}.gguf", ftype=ft) for ft in ("f32", "bf16", "f16")}
    shutil.rmtree(src)
    from jepa.convert.quantize import quantize

    for variant, qt in QUANT.items():
        if variant in only:
            files[qt] = str(workdir / f"{qt}.gguf")
            quantize(files["f32"], files[qt], qt)
    t_conv = time.perf_counter() - t0
    onnx_path = workdir / "model.onnx"
    export = export_onnx(tmodel, spec, onnx_path) if any(v.startswith(("ort", "ov")) for v in only) else {}
    print(f"[{name}] built and converted in {t_conv:.0f} s, exported ({export.get('exporter')}) in "
          f"{time.perf_counter() - t0 - t_conv:.0f} s", file=sys.stderr)
    peers_ok = export.get("exporter") is not None

    jm = {f"jepa-{ft}": jepa.Model(path) for ft, path in files.items()}
    ctxs = {k: m.context(threads=threads) for k, m in jm.items() if k in only}
    sess = None
    if peers_ok and "ort-f32" in only:
        sess = ort.InferenceSession(str(onnx_path), _ort_options(threads), providers=["CPUExecutionProvider"])
    sess8 = None
    if peers_ok and "ort-int8" in only:
        int8_path = ort_int8(onnx_path, workdir / "model-int8.onnx")
        cpu = ["CPUExecutionProvider"]
        sess8 = ort.InferenceSession(str(int8_path), _ort_options(threads), providers=cpu)
    core = ov.Core()
    ov_int8 = ov_int8_models(core, onnx_path, spec, seed, only) if peers_ok else {}
    model_info: dict[str, Any] = {
        "spec": asdict(spec),
        "tokens": spec.tokens,
        "gflop_per_item": round(spec.flops() / 1e9, 3),
        "export": export,
        "jepa_kernels": {k: jepa_kernels(m) for k, m in jm.items()},
        "file_mb": {f"jepa-{ft}": round(Path(p).stat().st_size / 1e6, 1) for ft, p in files.items()},
        "ov_kernels": {},
    }

    tforward = last_hidden(tmodel, spec.kind)

    def torch_run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return tforward(torch.from_numpy(x)).numpy()

    rng = np.random.default_rng(seed)
    cells = []
    for b in batches:
        x = rng.standard_normal(spec.input_shape(b), dtype=np.float32)
        xh = hf_layout(spec, x)
        compiled = {}
        if peers_ok:
            for prec in ("f32", "bf16"):
                if f"ov-{prec}" not in only:
                    continue
                try:
                    compiled[f"ov-{prec}"] = ov_compile(core, onnx_path, xh.shape, prec, threads)
                except RuntimeError as exc:
                    # Under ONEDNN_MAX_CPU_ISA=AVX2 on a CPU with bf16, OpenVINO takes the bf16 hint
                    # (it reads the CPU itself) and then finds no capped primitive for it.
                    if os.environ.get("ONEDNN_MAX_CPU_ISA") != "AVX2" or prec != "bf16":
                        raise
                    model_info.setdefault("ov_errors", {})[f"ov-{prec}"] = str(exc).strip().splitlines()[-1]
            for k, om in ov_int8.items():
                compiled[k] = ov_compile(core, om, xh.shape, "f32", threads)
        runs: dict[str, Callable[[], np.ndarray]] = {}
        if REF in only:
            runs[REF] = lambda xh=xh: torch_run(xh)
        if sess is not None:
            runs["ort-f32"] = lambda s=sess, xh=xh: s.run(None, {"x": xh})[0]
        if sess8 is not None:
            runs["ort-int8"] = lambda s=sess8, xh=xh: s.run(None, {"x": xh})[0]
        for k, cm in compiled.items():
            req = cm.create_infer_request()
            runs[k] = lambda req=req, xh=xh: req.infer({0: xh}, share_inputs=True)[0]
        for k, c in ctxs.items():
            runs[k] = lambda c=c, x=x: c.encode(x)
        variants = [Variant(k, runs[k]) for k in VARIANTS if k in runs]
        rounds = rounds_for(name, b)
        load_before = os.getloadavg()[0]
        busy0, self0 = machine_busy_s(), self_busy_s()
        t1 = time.perf_counter()
        samples, outputs = time_cell(variants, b, rounds, warmup)
        elapsed = time.perf_counter() - t1
        # The share of the machine's CPUs that other processes used while this cell ran.
        others = (machine_busy_s() - busy0 - (self_busy_s() - self0)) / (elapsed * (os.cpu_count() or 1))
        for k, cm in compiled.items():
            model_info["ov_kernels"].setdefault(k, ov_kernels(cm))
        del compiled, runs, variants
        ms = {k: statistics.median(v) for k, v in samples.items()}
        gflops = {k: spec.flops() / (v / 1000.0) / 1e9 for k, v in ms.items()}
        share = {k: peak_share(g, peaks, k) for k, g in gflops.items()}
        ratios = {r.key: paired_ratio(samples, r.peers, r.jepa) for r in RATIOS}
        ref = outputs.get(REF)
        rel, cos = {}, {}
        if ref is not None:
            scale = float(np.abs(ref).max())
            for k, out in outputs.items():
                if k != REF:
                    rel[k] = _g(float(np.abs(out - ref).max()) / scale)
                    cos[k] = float(_pooled_cos(out, ref, spec.prefix))
        # jepa's promises: a batch gives each item the bits it gets alone, whatever the thread count.
        batch_ident = {k: None if b == 1 else bit_identical(c.encode, x, outputs[k]) for k, c in ctxs.items()}
        thread_ident = {}
        k1 = min(b, 2)
        for k, c in ctxs.items():
            one = jm[k].context(threads=1).encode(x[:k1])
            two = c.encode(x[:k1]) if threads == 2 else jm[k].context(threads=2).encode(x[:k1])
            thread_ident[k] = one.view(np.uint32).tobytes() == two.view(np.uint32).tobytes()
        exact_peers = [p for p in ("ort-f32", "ov-f32") if p in ms]
        cell = {
            "model": name,
            "batch": b,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "rounds": rounds,
            "warmup_rounds": warmup,
            "ms_per_img": {k: round(v, 2) for k, v in ms.items()},
            "gflops": {k: round(v, 1) for k, v in gflops.items()},
            "peak_share": share,
            "ratios": {k: (None if v is None else round(v, 3)) for k, v in ratios.items()},
            "goals": {r.key: (None if r.report_only else r.goal if r.goal is not None else TORCH_GOAL.get(b))
                      for r in RATIOS},
            "faster_exact_peer": min(exact_peers, key=lambda p: ms[p]) if exact_peers else None,
            "max_rel_diff_vs_torch": rel,
            "pooled_cos_vs_torch": cos,
            "batch_bit_identical": batch_ident,
            "threads_1_2_bit_identical": thread_ident,
            "samples_ms_per_img": {k: [round(s, 2) for s in v] for k, v in samples.items()},
            "load_avg_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "others_cpu_share": round(max(others, 0.0), 3),
            "seconds": round(elapsed, 1),
        }
        cells.append(cell)
        summary = "  ".join(f"{k}={v:.1f}" for k, v in ms.items())
        print(f"[{name} b{b}] ms/item {summary}  ({elapsed:.0f} s, load {load_before:.1f}, others "
              f"{100 * cell['others_cpu_share']:.0f}%)", file=sys.stderr)
    return cells, model_info


def summarise(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell and ratio: the value, its goal and whether it is met."""
    out = []
    for c in cells:
        for key, v in c["ratios"].items():
            goal = c["goals"].get(key)
            out.append({"model": c["model"], "batch": c["batch"], "ratio": key, "value": v, "goal": goal,
                        "meets_goal": None if v is None or goal is None else v >= goal})
    return out


def kernels_info(threads: int) -> dict[str, Any]:
    """What each peer's kernels are, where it can be read (jepa's and OpenVINO's per model)."""
    import onnxruntime as ort
    import openvino as ov
    import torch

    core = ov.Core()
    return {
        "onnxruntime": {"version": ort.__version__, "build": ort.get_build_info(),
                        "providers": ort.get_available_providers(),
                        "isa": "MLAS dispatches its kernels by CPUID at run time (not exposed; the GEMM "
                        "peak's mlas-f32 measures them)"},
        "openvino": {"version": ov.__version__,
                     "cpu": str(core.get_property("CPU", "FULL_DEVICE_NAME")),
                     "optimization_capabilities": list(core.get_property("CPU",
                                                                         "OPTIMIZATION_CAPABILITIES"))},
        "torch": {"version": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                  "mkldnn": torch.backends.mkldnn.is_available(), "mkl": torch.backends.mkl.is_available(),
                  "threads": threads},
    }


def isa_info(isa: str) -> dict[str, Any]:
    """What each engine was held to (--isa), and what it says it ran."""
    import jepa

    if isa != "avx2":
        return {"cap": "native", "jepa": jepa.cpu_kernels()}
    return {
        "cap": "avx2",
        "jepa": jepa.cpu_kernels() + " (JEPA_GEMM=avx2)",
        "openvino": "ONEDNN_MAX_CPU_ISA=AVX2 (its CPU plugin's oneDNN)",
        "torch": "ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2, ATEN_CPU_CAPABILITY=avx2 "
        "(kernels.torch and the peak's MKL line say what ran)",
        "openblas_peak": "OPENBLAS_CORETYPE=Haswell",
        "onnxruntime": "not held: MLAS picks its kernels by CPUID and has no switch; on a CPU with AVX-512 "
        "these are its AVX-512 figures" + (" (this one has AVX-512)" if "avx512f" in machine_info(1)["simd"]
                                            else ""),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="ViT-S only, batch 1 and 8, few rounds")
    mode.add_argument("--smoke", action="store_true", help="tiny models, every variant, 2 rounds (a test)")
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1),
                   help="threads for every engine")
    p.add_argument("--out", type=Path, default=None,
                   help=f"JSON to write (default {DEFAULT_OUT.relative_to(ROOT)}; with --quick {QUICK_OUT}, "
                   f"with --smoke {SMOKE_OUT})")
    p.add_argument("--models", default=None, help="comma-separated subset of " + ",".join(MODELS))
    p.add_argument("--batches", default=None, help="comma-separated batch sizes of the image models "
                   "(default 1,8,32; the video encoder always runs one clip)")
    p.add_argument("--variants", default=None, help="comma-separated subset of " + ",".join(VARIANTS))
    p.add_argument("--rounds", type=int, default=None,
                   help="timed rounds per cell (default: by model and batch)")
    p.add_argument("--peak-n", type=int, default=None, help=f"GEMM size of the peak measurement ({PEAK_N})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--note", default="", help="free text stored in the JSON")
    p.add_argument("--update", action="store_true",
                   help="keep the other cells of an existing --out file (re-measure one model or batch size)")
    p.add_argument("--isa", choices=("native", "avx2"), default="native",
                   help="avx2: hold every engine to AVX2 where it has a switch (see the module docstring)")
    p.add_argument("--peak-worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.isa == "avx2" and not args.peak_worker:
        os.environ.update(AVX2_ENV)  # before any engine is imported (each reads its switch once)
    from bench import cpu

    cpu.apply_peer_env()  # JEPA_CPU_FEATURES holds the peers to the same CPU class, before they load

    if args.peak_worker:
        res = _peak_worker(args.peak_worker, args.peak_n or PEAK_N, args.threads)
        print("PEAK-JSON " + json.dumps(res))
        return 0

    table = SMOKE_MODELS if args.smoke else MODELS
    default_models = ["vit-s16"] if args.quick else list(table)
    models = args.models.split(",") if args.models else default_models
    unknown = [m for m in models if m not in table]
    if unknown:
        p.error(f"unknown model(s): {', '.join(unknown)} (known: {', '.join(table)})")
    only = tuple(args.variants.split(",")) if args.variants else tuple(VARIANTS)
    bad = [v for v in only if v not in VARIANTS]
    if bad:
        p.error(f"unknown variant(s): {', '.join(bad)}")
    batch_table = SMOKE_BATCHES if args.smoke else QUICK_BATCHES if args.quick else BATCHES

    def batches_for(spec: Spec) -> tuple[int, ...]:
        if args.batches and spec.kind == "image":
            return tuple(int(b) for b in args.batches.split(","))
        return batch_table[spec.kind]

    def rounds_for(model: str, batch: int) -> int:
        if args.rounds:
            return args.rounds
        if args.smoke:
            return SMOKE_ROUNDS
        return QUICK_ROUNDS if args.quick else ROUNDS.get((model, batch), 3)

    peak_n = args.peak_n or (256 if args.smoke else PEAK_N)
    full_out = AVX2_OUT if args.isa == "avx2" else DEFAULT_OUT
    out: Path = args.out or (SMOKE_OUT if args.smoke else QUICK_OUT if args.quick else full_out)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.perf_counter()
    peak_runs = [measure_peaks(args.threads, peak_n, args.isa)]
    print(f"GEMM peaks (before): { {k: v.get('gflops') for k, v in peak_runs[0].items()} }", file=sys.stderr)
    peaks = peak_summary(peak_runs, peak_n, args.threads, args.isa)
    cells: list[dict[str, Any]] = []
    model_infos: dict[str, Any] = {}
    for m in models:
        with tempfile.TemporaryDirectory(prefix=f"jepa-bench-{m}-") as tmp:
            c, info = run_model(m, table[m], batches_for(table[m]), args.threads, rounds_for,
                                1 if args.smoke else WARMUP.get(m, 1), Path(tmp), args.seed, peaks, only)
        cells += c
        model_infos[m] = info
        gc.collect()
    peak_runs.append(measure_peaks(args.threads, peak_n, args.isa))
    print(f"GEMM peaks (after): { {k: v.get('gflops') for k, v in peak_runs[1].items()} }", file=sys.stderr)
    peaks = peak_summary(peak_runs, peak_n, args.threads, args.isa)
    # The shares were computed against the peaks before the cells; recompute against the best of both.
    for c in cells:
        c["peak_share"] = {k: peak_share(g, peaks, k) for k, g in c["gflops"].items()}
    seconds = time.perf_counter() - t0
    if args.update and out.is_file():
        old = json.loads(out.read_text())
        if old.get("schema") == SCHEMA:
            done = {(c["model"], c["batch"]) for c in cells}
            kept = [c for c in old["cells"] if (c["model"], c["batch"]) not in done]
            order = list(table)
            cells = sorted(kept + cells, key=lambda c: (order.index(c["model"]), c["batch"]))
            model_infos = {k: v for k, v in old.get("models", {}).items() if k not in model_infos} | (
                model_infos)
            started = min(started, old["started"]) if kept else started
            seconds += sum(c["seconds"] for c in kept)
        else:
            print(f"--update: {out} has schema {old.get('schema', 1)}, not {SCHEMA}; replacing it",
                  file=sys.stderr)
    result = {
        "benchmark": "bench-engine",
        "schema": SCHEMA,
        "description": "jepa (ggml) vs ONNX Runtime, OpenVINO and PyTorch eager on the same transformers "
        "models and weights, same inputs and threads; interleaved rounds, warm-up dropped, medians; "
        "ratio = peer / jepa (> 1: jepa faster), paired within rounds",
        "started": started,
        "seconds": round(seconds, 1),
        "quick": bool(args.quick),
        "smoke": bool(args.smoke),
        "note": args.note,
        "commit": git_commit(),
        "machine": machine_info(args.threads),
        "versions": versions(),
        "kernels": kernels_info(args.threads),
        "isa": isa_info(args.isa),
        "peaks": peaks,
        "variants": {k: {"class": c, "what": w} for k, (c, w) in VARIANTS.items() if k in only},
        "ratios": {r.key: {"jepa": r.jepa, "peers": list(r.peers),
                           "goal": None if r.report_only else r.goal if r.goal is not None else TORCH_GOAL}
                   for r in RATIOS},
        "flops": "per item: 2 x patches x (3 x tubelet x patch^2) x D + layers x (2 N (4 D^2 + 2 D F) + "
        "4 N^2 D), N = tokens incl. CLS",
        "models": model_infos,
        "cells": cells,
        "summary": summarise(cells),
    }
    write_record(out, result)
    print(f"wrote {out} ({seconds / 60:.1f} min)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
