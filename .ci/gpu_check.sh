#!/usr/bin/env bash
# Every GPU check in one device call of at most 10 minutes, for a lent H200 (sm_90); docs/gpu-check.md.
#
# Ahead, on a CPU machine (this one):
#   .ci/gpu_check.sh --build-core      the Python-independent core: vendored ggml + its CUDA backend
#                                        (sm_90 only) + libjepa, static, into build/cuda-core, installed
#                                        to build/cuda-core/dist and packed (xz) into build/cuda-core/pack,
#                                        what travels (about an hour on 2 cores; then minutes when only
#                                        the engine's sources changed). --pack: pack dist again
#   .ci/gpu_check.sh --prepare         build/gpu-carry: the wheels the GPU machine lacks (gguf, the
#                                        world-model peers), CPython 3.12's headers and the reference
#                                        bundles the suites read (V-JEPA 2-AC, LeWM, V-JEPA 2.1, LeVJEPA)
#   .ci/gpu_check.sh --dry-run         what the call takes along (<= 64 MiB), the core (sm_90, these
#                                        sources, no extension) and the Python it meets (3.12)
#   .ci/gpu_check.sh --rehearse [--quick]   every step here on the CPU: device cpu for cuda:0, the
#                                        module built against a CPU core (build/cpu-core/dist)
# On the GPU machine, the one device call (the `run` tool):
#   command: bash .ci/gpu_check.sh --out $OUT
#   carry:   ["build/cuda-core/pack", "build/gpu-carry"]
#   timeout_s: 600
# It builds jepa._engine and the native suites against the carried core with the machine's python3
# (seconds on 16 cores), then runs, each step time-boxed and the next one run whatever the last gave:
# ctest, the parity suites on cuda:0, the CPU's bit-identity suites on cuda:0 (reported, not assumed),
# the batch rule, the server on cuda:0 and on cpu,cuda:0, and tools/bench/gpu.py against the machine's
# PyTorch CUDA in what time is left. $OUT gets 8 files: summary.json, gpu-check.log, ctest.xml,
# parity.xml, identity.xml, batch-rule.json, server.json, bench-gpu.json.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

MODE=gpu
QUICK=0
CPU_CORE=0
OUT_DIR=${OUT:-}
BUDGET=${GPU_CHECK_BUDGET_S:-540}   # the whole call, inside the tool's 600 s
while [ $# -gt 0 ]; do
    case "$1" in
        --build-core) MODE=build-core ;;
        --cpu) CPU_CORE=1 ;;
        --prepare) MODE=prepare ;;
        --pack) MODE=pack ;;
        --dry-run) MODE=dry-run ;;
        --rehearse) MODE=rehearse ;;
        --quick) QUICK=1 ;;
        --out) OUT_DIR=$2; shift ;;
        --budget-s) BUDGET=$2; shift ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

CUDA_CORE=build/cuda-core
CPU_CORE_DIR=${GPU_CHECK_CPU_CORE_DIR:-build/cpu-core}  # the rehearsal's core (a test points it at none, as on CI)
CARRY=build/gpu-carry
HOST_PY=${GPU_CHECK_HOST_PYTHON:-$ROOT/.venv/bin/python}
CUBLAS_WHEEL=nvidia-cublas==13.0.2.14   # headers + libcublas.so.13 for the build here (the toolkit has none)
# The wheels the GPU machine's python3 lacks (KINDS.md's list): gguf for the converter, and the world-model
# peers tools/bench/gpu.py times (requirements/bench.txt's pins) with their missing dependencies. PyAV
# (34 MiB) stays behind: the check decodes no video, and stage writes a stand-in where it is missing.
CARRY_WHEELS="gguf==0.19.0 cc-vjepa2==0.0.3 stable-worldmodel==0.1.1 gymnasium==1.4.0 loguru==0.7.3 farama-notifications==0.0.6"

# ---- ahead, on a CPU machine ------------------------------------------------------------------------

build_core() {  # build_core DIR CUDA(0|1): configure, build and install the core into DIR/dist
    local dir=$1 cuda=$2 t0 args=()
    t0=$(date +%s)
    if [ "$cuda" = 1 ]; then
        if [ ! -f build/cuda-deps/nvidia/cu13/include/cublas_v2.h ]; then
            "$HOST_PY" -m pip install --quiet --no-deps --target build/cuda-deps "$CUBLAS_WHEEL" || return 1
        fi
        args=(-DJEPA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DJEPA_CUBLAS_ROOT="$ROOT/build/cuda-deps/nvidia/cu13")
        [ -x /usr/local/cuda/bin/nvcc ] && args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
    else
        args=(-DJEPA_CUDA=OFF)
    fi
    # JEPA_NATIVE=OFF: ggml's portable x86-64 CPU code (AVX2), which runs on the GPU machine's CPU.
    nice -n 19 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DJEPA_NATIVE=OFF \
        -DJEPA_BUILD_PYTHON=OFF -DJEPA_BUILD_TESTS=OFF "${args[@]}" || return 1
    nice -n 19 cmake --build "$dir" -j "$(nproc)" || return 1
    rm -rf "$dir/dist"
    cmake --install "$dir" --component core --prefix "$dir/dist" || return 1
    strip --strip-debug "$dir"/dist/lib/*.a 2>/dev/null
    "$HOST_PY" .ci/gpu_check.py core-info --core "$dir/dist" --src . --build-seconds $(( $(date +%s) - t0 )) \
        || return 1
    pack_core "$dir"
}

pack_core() {  # pack_core DIR: DIR/dist -> DIR/pack/jepa-core.tar.xz (+ its jepa-core.json, read unpacked)
    local dir=$1
    rm -rf "$dir/pack"
    mkdir -p "$dir/pack"
    tar -C "$dir/dist" -cf - . | xz -T0 -6 > "$dir/pack/jepa-core.tar.xz" || return 1
    cp "$dir/dist/jepa-core.json" "$dir/pack/"
    du -sh "$dir/dist" "$dir/pack"
}

prepare_carry() {
    mkdir -p "$CARRY/wheels" "$CARRY/reference"
    # shellcheck disable=SC2086
    "$HOST_PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$CARRY/wheels" $CARRY_WHEELS || return 1
    # CPython 3.12's headers, in case the GPU machine's python3 has none (no python3-dev): a 3.12 here
    # (pyenv's) gives them; any 3.12.x builds extensions for every 3.12.
    local py312=${GPU_CHECK_PY312:-} c
    if [ -z "$py312" ]; then
        for c in python3.12 "$HOME"/.pyenv/versions/3.12.*/bin/python3.12; do
            if "$c" -c pass 2>/dev/null; then py312=$c; break; fi
        done
    fi
    rm -rf "$CARRY/python3.12-include"
    if [ -n "$py312" ]; then
        cp -r "$("$py312" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" "$CARRY/python3.12-include" || return 1
    else
        echo "prepare: no python3.12 here: CPython 3.12's headers not carried (the module build needs python3-dev there)"
    fi
    local ref=${JEPA_REFERENCE_DIR:-$ROOT/../shared/reference}
    for b in vjepa2_ac lewm vjepa2_1 levjepa; do
        rm -rf "$CARRY/reference/$b"
        cp -r "$ref/$b" "$CARRY/reference/$b" || return 1
    done
    du -sh "$CARRY"
}

case "$MODE" in
    build-core)
        if [ "$CPU_CORE" = 1 ]; then build_core "$CPU_CORE_DIR" 0; else build_core "$CUDA_CORE" 1; fi
        exit $? ;;
    prepare)
        prepare_carry
        exit $? ;;
    pack)
        if [ "$CPU_CORE" = 1 ]; then pack_core "$CPU_CORE_DIR"; else pack_core "$CUDA_CORE"; fi
        exit $? ;;
    dry-run)
        exec "$HOST_PY" .ci/gpu_check.py dry-run --core "$CUDA_CORE/dist" --pack "$CUDA_CORE/pack" \
            --carry "$CUDA_CORE/pack" "$CARRY" \
            ${OUT_DIR:+--json "$OUT_DIR/dry-run.json"} ;;
esac

# ---- the check: on the GPU machine (gpu) or here with the CPU standing in (rehearse) -----------------

if [ "$MODE" = gpu ]; then
    PY=${GPU_CHECK_PYTHON:-python3}
    DEV=cuda:0
    MIXED=cpu,cuda:0
    CORE_DIR=$CUDA_CORE
    export JEPA_REFERENCE_DIR=$ROOT/$CARRY/reference
    OUT_DIR=${OUT_DIR:-$ROOT/build/gpu-check/out}
else
    PY=$HOST_PY
    DEV=cpu
    MIXED=cpu,cpu
    CORE_DIR=$CPU_CORE_DIR
    OUT_DIR=${OUT_DIR:-$ROOT/build/gpu-check/rehearsal}
fi
# The steps' time boxes are the GPU machine's (16 cores); a rehearsal on 2 cores gets 4 times as long.
STEP_SCALE=${GPU_CHECK_STEP_SCALE:-$([ "$MODE" = rehearse ] && echo 4 || echo 1)}
WORK=${GPU_CHECK_WORK:-$ROOT/build/gpu-check/work}
mkdir -p "$OUT_DIR" "$WORK"
rm -f "$OUT_DIR"/{summary.json,gpu-check.log,ctest.xml,parity.xml,identity.xml,batch-rule.json,server.json,bench-gpu.json}
STEPS=$WORK/steps.tsv
LOGS=$WORK/logs
: > "$STEPS"
rm -rf "$LOGS"; mkdir -p "$LOGS"
T0=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 JEPA_CACHE_DIR=$WORK/cache

left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

# step NAME SECONDS CMD...: CMD under `timeout`, at most SECONDS and never past the budget (less a 20 s
# reserve for the summary); its output in the log; rc 200 = skipped (no time left or a step it needs failed).
step() {
    local name=$1 want=$(( $2 * STEP_SCALE )) t s rc
    shift 2
    t=$(( $(left) - 20 ))
    [ "$t" -gt "$want" ] && t=$want
    if [ "$t" -lt 5 ]; then
        printf '%s\t200\t0\tno time left in the %s s budget\n' "$name" "$BUDGET" >> "$STEPS"
        echo "== $name: skipped (no time left)"
        return 200
    fi
    echo "== $name (at most $t s)"
    s=$(date +%s)
    if declare -F "$1" > /dev/null; then  # a function of this script: timeout runs programs, so a bash runs it
        timeout -k 10 "$t" bash -c '"$@"' "$name" "$@" > "$LOGS/$name.log" 2>&1
    else
        timeout -k 10 "$t" "$@" > "$LOGS/$name.log" 2>&1
    fi
    rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - s ))" "$(tail -n 1 "$LOGS/$name.log" | tr '\t' ' ' | cut -c1-200)" >> "$STEPS"
    echo "   rc $rc in $(( $(date +%s) - s )) s: $(tail -n 1 "$LOGS/$name.log" | cut -c1-160)"
    return $rc
}
skip() {  # skip NAME WHY
    printf '%s\t200\t0\t%s\n' "$1" "$2" >> "$STEPS"
    echo "== $1: skipped ($2)"
}

# What the machine is, for the summary: informational, so a missing tool is a line saying so, never a
# failed step (CI's rehearsal has no nvidia-smi, nvcc or core).
machine_info() {
    echo "python: $("$PY" -c 'import sys; print(sys.version.split()[0], sys.executable)')"
    echo "cpus: $(nproc)"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || true
    else echo "nvidia-smi: none"; fi
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name(0))' 2>&1 || true
    if command -v nvcc >/dev/null; then nvcc --version | tail -n 2; else echo "nvcc: none"; fi
    if command -v cmake >/dev/null; then cmake --version | head -n 1; else echo "cmake: none"; fi
    if [ -f "$CORE/jepa-core.json" ]; then
        "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); print("core:", {k: d.get(k) for k in ("cuda", "cuda_architectures", "commit", "built", "total_mib")})' "$CORE/jepa-core.json" || true
    else echo "core: none at $CORE"; fi
    return 0
}

# Wheels: what the machine's python3 lacks, into a folder of their own (nothing installed system-wide).
wheels() {
    rm -rf "$WORK/wheels-site"
    "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/wheels-site" \
        "$CARRY"/wheels/*.whl
}

# The directory holding lib/libcublas.so.13 and lib/libcudart.so.13 for this python: the CUDA 13
# wheels PyTorch brought (nvidia/cu13), else the toolkit's (empty: CMake's CUDAToolkit finds them).
cuda_libs() {
    "$PY" - <<'EOF'
import importlib.util, pathlib
spec = importlib.util.find_spec("nvidia")
for base in (spec.submodule_search_locations if spec else []) or []:
    for lib in sorted(pathlib.Path(base).glob("*/lib/libcublas.so.13")):
        print(lib.parent.parent)
        raise SystemExit
EOF
}

# The module and the native suites against the prebuilt core, with this python.
module() {
    local py_exe pb args=()
    py_exe=$("$PY" -c 'import sys; print(sys.executable)')
    pb=$("$PY" -m pybind11 --cmakedir) || return 1
    [ -n "${CUDA_ROOT:-}" ] && args+=(-DJEPA_CUBLAS_ROOT="$CUDA_ROOT")
    [ -x /usr/local/cuda/bin/nvcc ] && args+=(-DCUDAToolkit_ROOT=/usr/local/cuda)
    # A python3 without its headers (no python3-dev): the carried ones of the same minor version.
    if ! "$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
        if [ -f "$CARRY/python$PYVER-include/Python.h" ]; then
            echo "module: $PY has no Python.h: the carried headers $CARRY/python$PYVER-include"
            args+=(-DPython_INCLUDE_DIR="$ROOT/$CARRY/python$PYVER-include")
        else
            echo "module: $PY has no Python.h and none was carried for $PYVER (.ci/gpu_check.sh --prepare)"
        fi
    fi
    rm -rf "$WORK/module"
    cmake -S . -B "$WORK/module" -G Ninja -DCMAKE_BUILD_TYPE=Release -DJEPA_PREBUILT_CORE="$CORE" \
        -DPython_EXECUTABLE="$py_exe" -Dpybind11_DIR="$pb" -DJEPA_BUILD_TESTS="$1" "${args[@]}" || return 1
    local nice=()
    [ "$MODE" = rehearse ] && nice=(nice -n 19)
    "${nice[@]}" cmake --build "$WORK/module" -j "$(nproc)" || return 1
    "$PY" .ci/gpu_check.py stage --engine "$(ls "$WORK"/module/_engine*.so)" --site "$WORK/site" || return 1
    PYTHONPATH=$WORK/site:$ROOT/server${PYTHONPATH:+:$PYTHONPATH} "$PY" -c '
import sys, jepa, jepa._engine as e
print("engine", e.__file__, "version", jepa.__version__, "has_cuda", e.has_cuda())
sys.exit(0 if e.has_cuda() or sys.argv[1] != "gpu" else "a CUDA core was carried, but this module has no CUDA")' "$MODE"
}

summary() {
    cp "$LOGS/machine.log" "$WORK/machine.txt" 2>/dev/null || machine_info > "$WORK/machine.txt" 2>&1
    printf '{"mode": "%s", "quick": %s, "device": "%s", "mixed": "%s", "budget_s": %s, "seconds": %s}\n' \
        "$MODE" "$([ "$QUICK" = 1 ] && echo true || echo false)" "$DEV" "$MIXED" "$BUDGET" "$(( $(date +%s) - T0 ))" \
        > "$WORK/run.json"
    "$PY" .ci/gpu_check.py summary --steps "$STEPS" --out-dir "$OUT_DIR" \
        --extra "$WORK/run.json" "$WORK/preflight.json" "$WORK/stage.json" "$WORK/machine.txt" 2>&1 | tee "$WORK/summary.txt"
    local rc=${PIPESTATUS[0]}
    # The log: the machine, every step's output and the summary, capped at 15 MiB (the tool brings back 16).
    { for f in "$LOGS"/*.log; do echo; echo "==== $(basename "$f" .log)"; cat "$f"; done
      echo; cat "$WORK/summary.txt"; } | tail -c 15000000 > "$OUT_DIR/gpu-check.log"
    return "$rc"
}

# What the steps' functions read, for the bash that `step` runs them in.
export -f build_core pack_core wheels cuda_libs module machine_info
export ROOT MODE CARRY CPU_CORE_DIR HOST_PY CUBLAS_WHEEL PY WORK

echo "gpu_check.sh: $MODE$([ "$QUICK" = 1 ] && echo ' --quick'), device $DEV, mixed $MIXED, budget $BUDGET s, out $OUT_DIR"
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -W default -o console_output_style=classic)
echo '{}' > "$WORK/stage.json"
echo '{}' > "$WORK/preflight.json"
HOST_OR_PY=$PY

# 1. The Python the machine lacks, and the module built here against the core.
if [ "$MODE" = gpu ]; then
    step wheels 60 wheels
    export PYTHONPATH=$WORK/wheels-site${PYTHONPATH:+:$PYTHONPATH}
    CUDA_ROOT=$(cuda_libs)
    export CUDA_ROOT
    [ -n "$CUDA_ROOT" ] && export LD_LIBRARY_PATH=$CUDA_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# The core: unpacked from the pack that travels (build/cuda-core/pack), else the installed folder.
CORE=$ROOT/$CORE_DIR/dist
PACK=$ROOT/$CORE_DIR/pack
if [ "$QUICK" = 0 ]; then
    if [ "$MODE" = rehearse ] && [ ! -f "$PACK/jepa-core.tar.xz" ]; then
        step cpu-core 750 build_core "$CPU_CORE_DIR" 0   # the rehearsal's own core (minutes, once)
    fi
    if [ -f "$PACK/jepa-core.tar.xz" ]; then
        step core 60 bash -c 'rm -rf "$1" && mkdir -p "$1" && xz -dc "$2/jepa-core.tar.xz" | tar -x -C "$1"' core \
            "$WORK/core" "$PACK" && CORE=$WORK/core
    fi
fi
export CORE
step machine 30 machine_info  # the GPU, the driver, python, torch, nvcc, the core (into summary.json)
# The dry-run's checks where the check runs (the core against these sources, this python): a failure is
# reported and the steps go on (a stale core whose API did not change still builds and runs).
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
export PYVER
PRE=(--python "$PYVER" --json "$WORK/preflight.json")
if [ "$QUICK" = 0 ]; then  # --quick builds nothing: the tree alone
    PRE+=(--core "$CORE" --pack "$PACK" --carry "$CORE_DIR/pack")
    [ "$MODE" = rehearse ] && PRE+=(--cpu-core)
fi
step preflight 60 "$HOST_OR_PY" .ci/gpu_check.py dry-run "${PRE[@]}"
if [ "$QUICK" = 1 ]; then
    # --quick (the rehearsal's test): the engine already installed for this python stands in for the build.
    skip module "--quick: the installed jepa._engine stands in for the module build"
    ENGINE=$("$PY" -c 'import jepa._engine as e; print(e.__file__)')
    "$PY" .ci/gpu_check.py stage --engine "$ENGINE" --site "$WORK/site" > "$WORK/stage.json"
    BUILT=1
else
    if step module 300 module ON; then
        BUILT=1
        grep -o '{"site".*}' "$LOGS/module.log" | tail -n 1 > "$WORK/stage.json"
    else
        BUILT=0
    fi
fi
export PYTHONPATH=$WORK/site:$ROOT/server${PYTHONPATH:+:$PYTHONPATH}

if [ "$BUILT" = 1 ]; then
    # 2. The native suites of this build (the C API and the kernels on the CPU; the CUDA build's host code).
    if [ "$QUICK" = 1 ]; then
        skip ctest "--quick: no native build"
    else
        step ctest 150 ctest --test-dir "$WORK/module" -j "$(nproc)" --timeout 120 --output-on-failure \
            --output-junit "$OUT_DIR/ctest.xml"
    fi
    # 3. Parity on the device: ViT / I-JEPA / LeJEPA layouts, V-JEPA 2 encoders + classifier + predictor,
    #    the AC and LeWM goldens (upstream bundles), text. The tolerances are the CPU suites'.
    PARITY=(tests/test_parity_vit.py tests/test_vjepa2_parity.py tests/test_classify.py tests/test_predictor_api.py
            tests/test_reference_vjepa2_ac.py tests/test_reference_lewm.py tests/test_world_ac.py
            tests/test_world_lewm.py tests/test_text_parity.py tests/test_reference_vjepa2_1.py
            tests/test_reference_levjepa.py)
    IDENTITY=(tests/test_engine_batch_threads.py tests/test_video_batch.py)
    if [ "$QUICK" = 1 ]; then
        PARITY=(tests/test_classify.py tests/test_predictor_api.py)
        IDENTITY=(tests/test_video_batch.py)
    fi
    step parity 200 env JEPA_DEVICE="$DEV" "${PYTEST[@]}" "${PARITY[@]}" --junitxml="$OUT_DIR/parity.xml"
    # 4. The CPU's bit-identity promises (batch, threads), asked of the device: reported, not assumed.
    step identity 60 env JEPA_DEVICE="$DEV" "${PYTEST[@]}" "${IDENTITY[@]}" --junitxml="$OUT_DIR/identity.xml"
    # 5. The batch rule: batched within 1e-6 of single in f32, and whether bit-identical.
    step batch 90 "$PY" .ci/gpu_check.py batch --device "$DEV" --out "$OUT_DIR/batch-rule.json" \
        $([ "$QUICK" = 1 ] && echo --quick)
    # 6. The server on the device alone and on the CPU and the device (one queue, two devices).
    step server 90 "$PY" .ci/gpu_check.py server --device "$DEV" --mixed "$MIXED" --out "$OUT_DIR/server.json" \
        $([ "$QUICK" = 1 ] && echo --quick)
    # 7. Speed against PyTorch on the same device and weights, in what time is left.
    BENCH=(--device "$DEV" --out "$OUT_DIR/bench-gpu.json")
    if [ "$MODE" = rehearse ]; then
        BENCH+=(--smoke)
        [ "$QUICK" = 1 ] && BENCH+=(--only vit)
    fi
    BENCH_T=$(( $(left) - 30 ))
    BENCH+=(--budget-s "$(( BENCH_T > 20 ? BENCH_T - 15 : 5 ))")
    step bench "$BENCH_T" "$PY" tools/bench/gpu.py "${BENCH[@]}"
else
    for s in ctest parity identity batch server bench; do skip "$s" "the module did not build"; done
fi

summary
