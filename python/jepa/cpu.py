"""What the CPU can do, as the engine sees it: the one place Python asks.

The engine detects the CPU's features once and masks them by ``JEPA_CPU_FEATURES`` (a CPU class such
as ``x86-64-v3``, feature names, joined by ``,``; docs/cpu.md), so a test, a tool or a benchmark run
under a mask stands for a smaller CPU: the kernels it picks, the skips it makes and what it believes
the peers can do all follow the mask. Nothing else reads ``/proc/cpuinfo`` to decide anything (a
benchmark still records it, as what the machine was).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from . import _engine

# Features a half-precision (bf16) kernel runs on: the engine's, and what oneDNN (OpenVINO's bf16
# hint) needs to compute in bf16 rather than emulate it.
BF16_FEATURES = frozenset({"avx512_bf16", "amx_bf16"})
# Features that give int8 dot products beyond AVX2's VPMADDUBSW (the peers' int8 is fast there).
VNNI_FEATURES = frozenset({"avx512_vnni", "avx_vnni", "amx_int8", "asimddp"})


@dataclass(frozen=True)
class CpuInfo:
    """The engine's view of the CPU: its features (masked), what it detected, and the mask."""

    features: frozenset[str]
    detected: frozenset[str]
    mask: str  # JEPA_CPU_FEATURES as given ("" when unset)
    mask_error: str  # why the mask was refused ("" when it was not; a refused mask leaves no feature)
    kernels: str  # jepa.cpu_kernels(): the kernel line this process runs

    def has(self, *names: str) -> bool:
        """Whether every named feature is present (after the mask)."""
        unknown = set(names) - ALL_FEATURES
        if unknown:
            raise ValueError(f"unknown CPU feature(s) {sorted(unknown)}; known: {sorted(ALL_FEATURES)}")
        return set(names) <= self.features

    @property
    def bf16(self) -> bool:
        """bf16 arithmetic in hardware (AVX512-BF16 or AMX-BF16): the half class computes in bf16."""
        return bool(self.features & BF16_FEATURES)

    @property
    def vnni(self) -> bool:
        """int8 dot-product instructions (VNNI, AMX-INT8 or ARM's SDOT)."""
        return bool(self.features & VNNI_FEATURES)

    @property
    def masked(self) -> bool:
        return bool(self.mask)


@dataclass(frozen=True)
class KernelPath:
    """One row of the engine's kernel-path table: a JEPA_GEMM value, its caps, and what it runs here."""

    name: str
    f32_cap: str
    bf16_cap: str
    q8_cap: str
    amx: bool
    stands_for: str
    kernels: str  # what this CPU (masked) runs under it: a cpu_kernels() line
    f32: str  # ... kind by kind: the f32 / f16 kernel ("avx2-fma"; "ggml" on ggml's path)
    bf16: str  # the bf16 kernel ("amx", "avx512-bf16", or the f32 one: bf16 weights widened)
    q8: str  # the q8_0 product ("amx-int8", "avx512-vnni", "avx-vnni", "avx2", "neon-dotprod", "portable")
    selected: bool  # the row this process runs


@dataclass(frozen=True)
class CpuClass:
    """A CPU class JEPA_CPU_FEATURES takes: a kind of CPU met in the field."""

    name: str
    features: frozenset[str]
    example: str


def _split(names: str) -> frozenset[str]:
    return frozenset(names.split())


@cache
def cpu_info() -> CpuInfo:
    """The engine's view of this CPU, read once (the engine reads it once per process too)."""
    return CpuInfo(
        features=_split(_engine.cpu_features()),
        detected=_split(_engine.cpu_features_detected()),
        mask=_engine.cpu_features_mask(),
        mask_error=_engine.cpu_features_mask_error(),
        kernels=_engine.cpu_kernels(),
    )


@cache
def kernel_paths() -> tuple[KernelPath, ...]:
    """The engine's kernel-path table, the default ("native") first."""
    return tuple(KernelPath(**row) for row in _engine.kernel_paths())


@cache
def cpu_classes() -> tuple[CpuClass, ...]:
    """The CPU classes of this build's architecture, smallest first (JEPA_CPU_FEATURES takes each)."""
    return tuple(CpuClass(name, _split(feats), example) for name, feats, example in _engine.cpu_classes())


# Every feature name the engine knows (both architectures'), in the engine's order (features.h).
FEATURE_NAMES: tuple[str, ...] = tuple(_engine.cpu_feature_names().split())
ALL_FEATURES = frozenset(FEATURE_NAMES)


def distinct_paths(kinds: str = "", *, with_ggml: bool = False) -> tuple[str, ...]:
    """The JEPA_GEMM values that run something else than this process (and than each other) in the
    named kinds ("f32", "bf16", "q8", joined by ","; "": all three), in the table's order: what a
    suite runs again on every other path after its plain run. ggml's row only with with_ggml."""
    return tuple(_engine.kernel_paths_distinct(kinds, with_ggml).split())
