"""The CPU kernel paths and CPU classes of this machine, read from the engine's one table
(jepa.cpu: csrc/src/cpu/paths.cpp and features.cpp), on its features as JEPA_CPU_FEATURES masks them.
ggml's products are not a path of the promise and are left out.

    python tools/kernel_paths.py             JEPA_GEMM value<TAB>kernel line, one per distinct path
    python tools/kernel_paths.py --others    the values past the default whose f32 or bf16 kernels
                                             differ (what `make path-test` runs the every_path suite on)
    python tools/kernel_paths.py --classes   the smaller CPU classes this CPU can stand for (what
                                             `make cpu-test` runs the cpu_class tests under)
"""

from __future__ import annotations

import argparse

from jepa.cpu import CpuClass, cpu_classes, cpu_info, distinct_paths, kernel_paths

# The kinds whose kernels the every_path suite checks: a path that differs only in its q8_0 product
# (AVX-VNNI's int8 dots beside AVX2's) gets the native q8 suites' every-path run instead.
EVERY_PATH_KINDS = "f32,bf16"


def kernels_under(cap: str) -> str:
    """The kernel line (jepa.cpu_kernels()) a process with JEPA_GEMM=cap runs on this CPU, read from
    the table ("" and "native": the default)."""
    if cap in ("", "native"):
        return cpu_info().kernels
    lines = {row.name: row.kernels for row in kernel_paths()}
    if cap not in lines:
        raise ValueError(f"JEPA_GEMM={cap!r}: not a kernel path (the table has {', '.join(lines)})")
    return lines[cap]


def distinct() -> dict[str, str]:
    """JEPA_GEMM value -> kernel line, one per distinct path, the default ("") first."""
    return {cap: kernels_under(cap) for cap in ("", *distinct_paths())}


def classes_here() -> list[CpuClass]:
    """The smaller CPU classes this CPU can stand for: each a subset of what it has and not all of it
    (that run is the unmasked one), one per feature set."""
    have = cpu_info().detected
    out: dict[frozenset[str], CpuClass] = {}
    for c in cpu_classes():
        if c.features <= have and c.features != have:
            out.setdefault(c.features, c)
    return list(out.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--others", action="store_true", help="the values past the default, space-separated")
    group.add_argument("--classes", action="store_true", help="the CPU classes this CPU can stand for")
    args = ap.parse_args()
    if args.others:
        print(" ".join(distinct_paths(EVERY_PATH_KINDS)))
    elif args.classes:
        print(" ".join(c.name for c in classes_here()))
    else:
        for cap, line in distinct().items():
            print(f"{cap or '(default)'}\t{line}")


if __name__ == "__main__":
    main()
