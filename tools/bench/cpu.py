"""What the benchmarks record of the machine's CPU and believe about what it (and each peer) can do:
the one place, on the engine's one view (jepa.cpu), so JEPA_CPU_FEATURES masks it all at once.

A benchmark run under ``JEPA_CPU_FEATURES=x86-64-v3`` on an AVX-512 machine stands for an AVX2-only
CPU: the engine picks its AVX2 kernels, ``peer_env()`` holds the peers that have a switch to the same
class (oneDNN under OpenVINO and PyTorch, MKL, ATen's kernels, OpenBLAS's core), and every decision a
benchmark makes from the CPU (whether a bf16 peak exists, which goals apply) reads ``features()``.
ONNX Runtime's MLAS picks its kernels by CPUID and has no switch: ``held()`` says so in the record.
/proc/cpuinfo is read only to record what the machine was.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

# /proc/cpuinfo's flags worth a record's line (the rest are kept in "flags").
RECORDED_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
                  "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8",
                  "asimd", "asimddp")
# The switches the peers read once, at import: set by peer_env() before any of them is imported.
PEER_SWITCHES = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE")


def info() -> Any:
    """The engine's view of the CPU (jepa.cpu.CpuInfo), after JEPA_CPU_FEATURES."""
    from jepa.cpu import cpu_info

    return cpu_info()


def features() -> frozenset[str]:
    """The CPU features every decision is made on (masked)."""
    return frozenset(info().features)


def bf16() -> bool:
    """bf16 arithmetic in hardware (AVX512-BF16 / AMX-BF16): oneDNN's and jepa's half class compute in
    bf16 (elsewhere torch's bf16 matmul is emulated: minutes for a peak's product)."""
    return bool(info().bf16)


def proc_cpuinfo() -> tuple[str, set[str]]:
    """(model name, flags) of /proc/cpuinfo's first CPU; ("", set()) where there is none."""
    name, flags = "", set[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not name:
                name = line.split(":", 1)[1].strip()
            elif line.startswith(("flags", "Features")) and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name, flags


def _onednn_isa(f: frozenset[str]) -> str:
    if "amx_bf16" in f and "amx_int8" in f:
        return "AVX512_CORE_AMX"
    if "avx512_bf16" in f:
        return "AVX512_CORE_BF16"
    if "avx512_vnni" in f:
        return "AVX512_CORE_VNNI"
    if "avx512" in f:
        return "AVX512_CORE"
    if "avx2" in f:
        return "AVX2_VNNI" if "avx_vnni" in f else "AVX2"
    return "SSE41"


def _openblas_core(f: frozenset[str]) -> str:
    if "amx_bf16" in f:
        return "SapphireRapids"
    if "avx512_bf16" in f:
        return "Cooperlake"
    if "avx512" in f:
        return "SkylakeX"
    return "Haswell" if "avx2" in f else "Nehalem"


def peer_env(*, onednn: bool = False) -> dict[str, str]:
    """The peers' switches that hold them to the masked CPU class; {} when nothing is masked away (the
    peers then pick for themselves, as a user's would). x86 only: ARM's peers have no such switch.

    MKL's, ATen's and OpenBLAS's switches are safe. oneDNN's (ONEDNN_MAX_CPU_ISA) only with onednn:
    OpenVINO's CPU plugin reads the CPU itself and then finds no capped primitive for its int8 and bf16
    graphs (measured on Sapphire Rapids held to AVX2: "could not create a primitive descriptor"), so by
    default OpenVINO and torch's oneDNN ops run unheld, and held() says so."""
    i = info()
    if i.features == i.detected or platform.machine().lower() not in ("x86_64", "amd64"):
        return {}
    f = frozenset(i.features)
    out = {
        "MKL_ENABLE_INSTRUCTIONS": "AVX512" if "avx512" in f else "AVX2" if "avx2" in f else "SSE4_2",
        "ATEN_CPU_CAPABILITY": "avx512" if "avx512" in f else "avx2" if "avx2" in f else "default",
        "OPENBLAS_CORETYPE": _openblas_core(f),
    }
    if onednn:
        out["ONEDNN_MAX_CPU_ISA"] = _onednn_isa(f)
    return out


def apply_peer_env(*, onednn: bool = False) -> dict[str, str]:
    """peer_env() into this process's environment (children inherit it); call it before any peer is
    imported. A switch already set by the caller is kept. Returns what is now in force."""
    for k, v in peer_env(onednn=onednn).items():
        os.environ.setdefault(k, v)
    return {k: os.environ[k] for k in PEER_SWITCHES if k in os.environ}


def held() -> dict[str, str]:
    """What each engine was held to, for the record."""
    i = info()
    out = {"jepa": i.kernels, "features": " ".join(sorted(i.features)), "mask": i.mask or "none (native)"}
    switches = {k: os.environ[k] for k in PEER_SWITCHES if k in os.environ}
    if switches:
        out["peers"] = ", ".join(f"{k}={v}" for k, v in switches.items())
    if i.features != i.detected:
        here = "this CPU's (" + " ".join(sorted(i.detected)) + ")"
        out["onnxruntime"] = f"not held: MLAS picks kernels by CPUID and has no switch; figures are {here}"
        if "ONEDNN_MAX_CPU_ISA" not in os.environ:
            out["openvino"] = ("not held: its CPU plugin reads the CPU itself, and a oneDNN cap leaves its "
                               f"int8 and bf16 graphs without primitives; figures are {here}")
    return out


def machine(threads: int) -> dict[str, Any]:
    """The machine record every benchmark writes: the CPU as /proc/cpuinfo names it and as the engine
    sees it (features, mask, kernels), cores, threads, the OS, and the switches in force."""
    name, flags = proc_cpuinfo()
    i = info()
    return {
        "cpu": name or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "threads": threads,
        "simd": sorted(f for f in flags if f in RECORDED_FLAGS),
        "flags": sorted(flags),
        "features": sorted(i.features),
        "features_detected": sorted(i.detected),
        "cpu_mask": i.mask,
        "kernels": i.kernels,
        "os": platform.platform(),
        "env": {k: os.environ.get(k) for k in (*PEER_SWITCHES, "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS",
                                                "OMP_WAIT_POLICY", "JEPA_GEMM", "JEPA_CPU_FEATURES")},
        "shared": "yes: other jobs may run; runs are interleaved and medians taken",
    }


def masked() -> bool:
    """Whether JEPA_CPU_FEATURES masks a feature of this CPU away: the run stands for a smaller CPU."""
    i = info()
    return i.features != i.detected


def kernels_under(mask: str) -> str:
    """The kernel line jepa runs under JEPA_CPU_FEATURES=mask, asked of a child process (the engine
    reads the mask once, at load)."""
    import subprocess
    import sys

    env = {**os.environ, "JEPA_CPU_FEATURES": mask}
    code = "import jepa; print(jepa.cpu_kernels())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def smaller_class() -> str | None:
    """The CPU class a benchmark stands in for when it measures a smaller CPU beside this one: x86-64-v3
    (AVX2 + FMA, the AVX2-only EPYC) where this CPU, as masked, has more; None elsewhere."""
    from jepa.cpu import cpu_classes

    i = info()
    for c in cpu_classes():
        if c.name == "x86-64-v3" and c.features <= i.features and c.features != i.features:
            return c.name
    return None
