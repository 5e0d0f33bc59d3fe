"""The CPU kernel paths this machine runs, one JEPA_GEMM value each (the engine's own kernels:
AVX-512 with and without its bf16 kernel, AVX2 with and without AVX-VNNI's int8 dots, NEON on ARM64,
portable; ggml's products are not a path of the promise and are left out). Each value is asked of a
fresh process, since the engine detects once.

    python tools/kernel_paths.py            JEPA_GEMM value<TAB>kernel line, one per distinct path
    python tools/kernel_paths.py --others   the values past the default (what `make path-test` runs)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

# From the top down; "" is the default (the best the CPU has). A cap the CPU lacks falls to the
# next path down, or (neon on x86, avx2 on ARM) leaves the default: either way it repeats a line
# and is dropped.
CAPS = ("", "avx512bf16", "avx512", "avxvnni", "avx2", "neon", "portable")
# Caps that change only the q8_0 product (AVX2's f32 kernels with AVX-VNNI's int8 dots): the kernel
# path comparison runs them; the every_path suite (--others) would repeat avx2's f32 checks.
Q8_ONLY = ("avxvnni",)


def kernels_under(cap: str) -> str:
    """The engine's kernel line (jepa.cpu_kernels) in a process with JEPA_GEMM=cap."""
    env = {**os.environ, "JEPA_GEMM": cap}
    code = "import jepa; print(jepa.cpu_kernels())"
    r = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return r.stdout.strip()


def distinct_paths() -> dict[str, str]:
    """JEPA_GEMM value -> kernel line, one per distinct path, the default first."""
    seen: dict[str, str] = {}
    for cap in CAPS:
        line = kernels_under(cap)
        if line != "ggml" and line not in seen.values():
            seen[cap] = line
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--others", action="store_true", help="only the values past the default, space-separated")
    args = ap.parse_args()
    paths = distinct_paths()
    if args.others:
        print(" ".join(cap for cap in paths if cap and cap not in Q8_ONLY))
    else:
        for cap, line in paths.items():
            print(f"{cap or '(default)'}\t{line}")


if __name__ == "__main__":
    main()
