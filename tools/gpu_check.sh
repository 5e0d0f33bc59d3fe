#!/usr/bin/env bash
# Every GPU check in one run, for a lent GPU machine (an H200 here: sm_90).
#
#   tools/gpu_check.sh --build   on a CPU machine, ahead of time: the CUDA extension into build/cuda
#                                (about an hour on 2 cores; small enough to carry: `carry: [build/cuda, .venv]`)
#   tools/gpu_check.sh           on the GPU machine: the parity suites on cuda:0, then the benchmarks
#                                against PyTorch CUDA; JSON and logs under $OUT (default tests/results)
#
# The parity suites run unchanged with JEPA_DEVICE=cuda:0 (jepa.Model's default device). Their
# batch / thread bit-identity checks are CPU promises: a failure of one of those on the GPU is
# reported, not hidden. Nothing here downloads weights: the models are random, built on the spot.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${JEPA_CUDA_BUILD:-build/cuda}
OUT=${OUT:-tests/results}
PY=${PYTHON:-.venv/bin/python}
ARCH=${CUDA_ARCH:-90}
mkdir -p "$OUT"

build() {
    "$PY" -m pip install --quiet nvidia-cublas-cu12 || return 1
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DJEPA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
        -DJEPA_BUILD_TESTS=ON -DPython_EXECUTABLE="$PY" || return 1
    cmake --build "$BUILD" -j "$(nproc)"
}

if [ "${1:-}" = "--build" ]; then
    build
    exit $?
fi

status=0
if ! ls "$BUILD"/_engine*.so >/dev/null 2>&1; then
    echo "no CUDA build in $BUILD: building it here (slow; use --build ahead of time)"
    build || exit 1
fi
# Load the CUDA extension instead of the CPU one, without reinstalling anything.
export PYTHONPATH="$PWD/$BUILD:$PWD/python:$PWD/server${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'EOF' || exit 1
import jepa._engine as e
assert e.has_cuda(), f"{e.__file__} has no CUDA backend"
print("engine:", e.__file__)
EOF
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu-info.txt"

# 1. Native suites of the CUDA build (the C API on the CPU, and the header / syntax checks).
ctest --test-dir "$BUILD" --output-on-failure 2>&1 | tee "$OUT/gpu-ctest.log" || status=1

# 2. Parity on cuda:0: ViT / I-JEPA / LeJEPA layouts, V-JEPA 2, the world models' goldens.
JEPA_DEVICE=cuda:0 "$PY" -m pytest -q -p no:cacheprovider \
    tests/test_parity_vit.py tests/test_vjepa2_parity.py tests/test_reference_vjepa2_ac.py \
    tests/test_reference_lewm.py tests/test_world_ac.py tests/test_world_lewm.py \
    --junitxml="$OUT/gpu-parity.xml" 2>&1 | tee "$OUT/gpu-parity.log" || status=1

# 3. Speed against PyTorch CUDA on the same weights.
"$PY" tools/bench_gpu.py --device cuda:0 --out "$OUT/bench-gpu.json" 2>&1 | tee "$OUT/gpu-bench.log" || status=1
exit $status
