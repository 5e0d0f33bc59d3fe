"""GEMM peaks: the best GFLOP/s of an n^3 product at the benchmark's thread count, f32 (OpenBLAS
through numpy, MLAS through ONNX Runtime, MKL through torch) and bf16 (oneDNN through torch), the
yardstick bench.engine's cells are a share of. The numpy and torch products each run in a child
process of their own environment (its thread count, the libraries' verbose modes):

    python tools/bench/peaks.py KIND N THREADS     # one child's peak, as a line PEAK-JSON {...}

Under a CPU mask (JEPA_CPU_FEATURES) OpenBLAS runs the class's core (bench.cpu.peer_env), the bf16
peak exists only where the class computes in bf16, and MLAS, which no switch holds, is measured and
recorded but is not the f32 class's peak."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/peaks.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench import cpu

PEAK_N = 2048
PEAK_REPS = 7
PREFIX = "PEAK-JSON "


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _best_gflops(fn: Callable[[], Any], n: int, reps: int = PEAK_REPS) -> float:
    fn()  # warm-up: thread pools, packing buffers
    best = min(_timed(fn) for _ in range(reps))
    return 2.0 * n**3 / best / 1e9


def _openblas_ctypes() -> dict[str, str]:
    """The OpenBLAS core numpy runs, by the calls threadpoolctl makes, through ctypes."""
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


def _openblas_info() -> dict[str, str]:
    """The OpenBLAS core numpy runs (threadpoolctl when installed, else the same calls by ctypes)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return _openblas_ctypes()
    for lib in threadpool_info():
        if lib.get("internal_api") == "openblas":
            return {"corename": str(lib.get("architecture")), "version": str(lib.get("version")),
                    "via": "threadpoolctl"}
    return _openblas_ctypes()


def worker(kind: str, n: int, threads: int) -> dict[str, Any]:
    """In the child process (its own env): one engine's GEMM peak."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    if kind == "openblas-f32":
        return {"gflops": _best_gflops(lambda: a @ b, n), "openblas": _openblas_info()}
    import torch

    torch.set_num_threads(threads)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    if kind == "torch-bf16":
        ta, tb = ta.to(torch.bfloat16), tb.to(torch.bfloat16)
    with torch.inference_mode():
        g = _best_gflops(lambda: torch.matmul(ta, tb), n)
    return {"gflops": g, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def _child(kind: str, n: int, threads: int, env: dict[str, str]) -> dict[str, Any]:
    import subprocess

    cmd = [sys.executable, str(Path(__file__).resolve()), kind, str(n), str(threads)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode:
        return {"error": r.stderr.strip()[-500:]}
    lines = r.stdout.splitlines()
    line = next(ln for ln in reversed(lines) if ln.startswith(PREFIX))
    out: dict[str, Any] = json.loads(line.removeprefix(PREFIX))
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
    from onnx import TensorProto, helper, numpy_helper

    from bench.peers import OPSET, ort_session

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"])], "gemm",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [n, n])],
        [numpy_helper.from_array(rng.standard_normal((n, n), dtype=np.float32), "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    sess = ort_session(model.SerializeToString(), threads)
    return _best_gflops(lambda: sess.run(None, {"A": a}), n)


def measure(threads: int, n: int) -> dict[str, Any]:
    """One measurement of every engine's GEMM peak at `threads` threads."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    # Some machines set these for the engines' sake; OpenBLAS's own choice of core is what numpy
    # users get, so they are unset for this measurement (and their values recorded in machine.env),
    # unless a CPU mask holds it to its class's core.
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    held = cpu.peer_env().get("OPENBLAS_CORETYPE")
    if held:
        env["OPENBLAS_CORETYPE"] = held
    out: dict[str, Any] = {"openblas-f32": _child("openblas-f32", n, threads, env)}
    out["mlas-f32"] = {"gflops": _ort_matmul_gflops(n, threads)}
    verbose = dict(os.environ, ONEDNN_VERBOSE="1", MKL_VERBOSE="1")
    out["mkl-f32"] = _child("torch-f32", n, threads, verbose)
    if cpu.bf16():
        out["onednn-bf16"] = _child("torch-bf16", n, threads, verbose)
    else:
        out["onednn-bf16"] = {"skipped": "no bf16 hardware (as the engine sees the CPU): torch's bf16 matmul "
                              "would be emulated, minutes per product"}
    for v in out.values():
        if "gflops" in v:
            v["gflops"] = round(v["gflops"], 1)
    return out


def summary(runs: list[dict[str, Any]], n: int, threads: int) -> dict[str, Any]:
    """The class peaks: the best of every measurement (before and after the cells) of each precision.
    Under a CPU mask, MLAS (which cannot be held) is measured and recorded but not the class's peak."""
    def best(prefixes: tuple[str, ...]) -> tuple[float | None, str | None]:
        got = [(r[k]["gflops"], k) for r in runs for k in r if k.startswith(prefixes) and "gflops" in r[k]]
        return max(got) if got else (None, None)

    held = ("openblas-f32", "mkl-f32")
    f32, f32_by = best(held if cpu.masked() else (*held, "mlas-f32"))
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


if __name__ == "__main__":
    kind, n_arg, threads_arg = sys.argv[1:4]
    print(PREFIX + json.dumps(worker(kind, int(n_arg), int(threads_arg))))
