# The two commands of the README: `make run` (the server, on the demo model unless MODEL=...)
# and `make test` (builds everything and runs every native and Python test).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BUILD  := build/dev
MODEL  ?=
ARGS   ?=
# The sanitizer + fuzz build (clang, ASan + UBSan, libFuzzer): docs/fuzzing.md.
FUZZ_BUILD   := build/fuzz
FUZZ         ?= 1         # 0: `make test` skips the sanitizer build and fuzz_gguf, saying so
FUZZ_SECONDS ?= 60        # per libFuzzer target under ctest (CI's bounded run)
FUZZ_RUNS    ?= 1000000   # per target in `make fuzz` (the long local runs)
FUZZ_LOGS    := $(FUZZ_BUILD)/logs
# The aarch64 cross build, its native suites run under qemu-user: docs/arm64.md.
ARM_BUILD    := build/aarch64
ARM          ?= 1         # 0: `make test` skips the aarch64 cross build and its emulated suites, saying so

.PHONY: run test install venv bench-deps qemu-deps native-test py-test path-test cpu-test lint clean
.PHONY: fuzz-deps fuzz-build sanitize fuzz-test fuzz fuzz-corpus
.PHONY: arm-deps arm-build arm-test arm-skipped golden-outputs
.PHONY: cuda-core cpu-core gpu-carry gpu-dry-run gpu-rehearse

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

venv: $(BIN)/python
	$(BIN)/pip install --quiet -r requirements/build.txt

# Editable install with a cached CMake build directory: a one-file change rebuilds in seconds.
install: venv
	$(BIN)/pip install --quiet --no-build-isolation \
	    -C build-dir=$(BUILD) -C cmake.define.JEPA_BUILD_TESTS=ON -e '.[all]'

run: install
	$(BIN)/jepa-server $(if $(MODEL),-m $(MODEL),--demo) $(ARGS)

# Each step timed by .ci/steps.sh, which prints the table of where the time went at the end.
TEST_STEPS = install bench-deps qemu-deps native-test py-test path-test cpu-test lint \
    $(if $(filter 0,$(strip $(ARM))),arm-skipped,arm-test) $(if $(filter 0,$(strip $(FUZZ))),fuzz-skipped,sanitize fuzz-test)
test:
	@MAKE="$(MAKE)" bash .ci/steps.sh $(TEST_STEPS)

# The test requirements and the benchmarks' peers (the tests run every benchmark's smoke mode).
bench-deps: venv
	$(BIN)/pip install --quiet -r requirements/bench.txt
	$(BIN)/pip install --quiet --no-deps -r requirements/bench-nodeps.txt

native-test:
	$(BIN)/ctest --test-dir $(BUILD) --output-on-failure

# pytest on every core (pytest-xdist; tests/conftest.py groups the tests by module, so a module's
# servers and models are made once, on one worker), the slowest tests listed at the end.
PYTEST_WORKERS ?= $(shell nproc)
PYTEST_PAR := -n $(PYTEST_WORKERS) --dist loadgroup
py-test:
	$(BIN)/python -m pytest -q $(PYTEST_PAR) --durations=30

# qemu-user from Debian when it is missing: tests/test_portable_wheel.py runs the portable wheel on an
# emulated AVX2-only CPU (Haswell) against this machine's bits. A machine where it cannot be installed
# fails here, loudly.
qemu-deps:
	@if ! command -v qemu-x86_64 >/dev/null 2>&1; then \
	    echo "qemu-deps: no qemu-x86_64; installing qemu-user (apt-get)"; \
	    { apt-get update -qq && apt-get install -y -qq --no-install-recommends qemu-user; } || { \
	        echo "qemu-deps: FAILED to install qemu-user: the AVX2-only CPU check cannot run" >&2; exit 1; }; \
	fi

# The bit-identity suite (marker every_path) again on each other CPU kernel path this CPU runs (py-test
# ran the default one, parity included): AVX2 and portable on every AVX2 CPU, and the AVX-512 FMA path
# beside the bf16 kernels where there are some (the engine's table: tools/kernel_paths.py --others).
# Parity (marker parity) stays on the default path: the exact class has the same bits on every path
# (tests/test_kernel_paths.py), so its parity there is its parity everywhere.
path-test:
	@for p in $$($(BIN)/python tools/kernel_paths.py --others); do \
	    echo "== the every_path suite (bit identity) with JEPA_GEMM=$$p"; \
	    JEPA_GEMM=$$p $(BIN)/python -m pytest -q $(PYTEST_PAR) -m "every_path and not parity" -p no:cacheprovider || exit 1; \
	done

# The tests that depend on what the CPU can do (marker cpu_class: benchmark smokes, path selection,
# cpu_kernels(), /info's matmul, the CPU-dependent skips) again under each smaller CPU class this CPU
# can stand for: JEPA_CPU_FEATURES masks what the engine detects and what the tools and tests believe
# about the peers (docs/cpu.md). py-test ran them as this CPU.
cpu-test:
	@for c in $$($(BIN)/python tools/kernel_paths.py --classes); do \
	    echo "== the cpu_class tests with JEPA_CPU_FEATURES=$$c"; \
	    JEPA_CPU_FEATURES=$$c $(BIN)/python -m pytest -q $(PYTEST_PAR) -m cpu_class -p no:cacheprovider || exit 1; \
	done

# ruff on the whole tree; mypy on python/jepa and server/jepa_server ([tool.mypy] in pyproject.toml).
lint:
	$(BIN)/ruff check python server tests tools .ci
	$(BIN)/mypy

# ---- sanitizers and fuzzing (docs/fuzzing.md) ------------------------------------------------

# clang with libFuzzer, from Debian only when it is missing (CI images run as root). A machine
# where it cannot be installed fails here, loudly: `make test FUZZ=0` is the explicit way round.
FUZZ_PROBE := extern "C" int LLVMFuzzerTestOneInput(const unsigned char *, unsigned long) { return 0; }
fuzz-deps:
	@if ! echo '$(FUZZ_PROBE)' | clang++ -x c++ -fsanitize=fuzzer,address,undefined -o /dev/null - 2>/dev/null; then \
	    echo "fuzz-deps: no clang with libFuzzer; installing clang libclang-rt-14-dev (apt-get)"; \
	    { apt-get update -qq && apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev; } || { \
	        echo "fuzz-deps: FAILED to install clang + libFuzzer: the ASan/UBSan suites and fuzz_gguf cannot run" >&2; \
	        echo "fuzz-deps: install them (docs/fuzzing.md), or skip explicitly with: make test FUZZ=0" >&2; exit 1; }; \
	fi

# ggml, the engine, the native suites and the libFuzzer targets under ASan + UBSan, with clang.
fuzz-build: fuzz-deps venv
	PATH=$(abspath $(BIN)):$$PATH CC=clang CXX=clang++ $(BIN)/cmake -S . -B $(FUZZ_BUILD) -G Ninja \
	    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DJEPA_FUZZ=ON -DJEPA_BUILD_PYTHON=OFF -DJEPA_BUILD_TESTS=ON \
	    -DJEPA_FUZZ_SECONDS=$(strip $(FUZZ_SECONDS))
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/cmake --build $(FUZZ_BUILD) -j$$(nproc)

# The native ctest suites under ASan + UBSan.
sanitize: fuzz-build
	$(BIN)/ctest --test-dir $(FUZZ_BUILD) --output-on-failure -LE fuzz

# fuzz_gguf for FUZZ_SECONDS over its seed corpus (a ctest test; a crash fails it).
fuzz-test: fuzz-build
	$(BIN)/ctest --test-dir $(FUZZ_BUILD) --output-on-failure -L fuzz

fuzz-skipped:
	@echo "WARNING: FUZZ=0: the ASan/UBSan native suites and the fuzz_gguf run were NOT run" >&2

# The long local runs, one target after another (FUZZ_RUNS executions each), logs in $(FUZZ_LOGS);
# the atheris targets keep going past a finding and write each distinct one to $(FUZZ_LOGS)/findings-*.
fuzz: fuzz-build bench-deps
	mkdir -p $(FUZZ_LOGS) $(FUZZ_BUILD)/corpus-media $(FUZZ_BUILD)/corpus-request $(FUZZ_BUILD)/corpus-text
	$(FUZZ_BUILD)/tests/fuzz/fuzz_gguf -runs=$(strip $(FUZZ_RUNS)) -timeout=20 -rss_limit_mb=3072 \
	    -print_final_stats=1 -dict=tests/fuzz/gguf.dict -artifact_prefix=$(FUZZ_LOGS)/ \
	    $(FUZZ_BUILD)/tests/fuzz/corpus-gguf tests/fuzz/corpus/gguf 2> $(FUZZ_LOGS)/gguf.log
	for t in media request text; do \
	    JEPA_FUZZ_FINDINGS=$(abspath $(FUZZ_LOGS))/findings-$$t $(BIN)/python tests/fuzz/fuzz_$$t.py \
	        -runs=$(strip $(FUZZ_RUNS)) -timeout=20 -rss_limit_mb=3072 -print_final_stats=1 \
	        -dict=tests/fuzz/$$t.dict -artifact_prefix=$(abspath $(FUZZ_LOGS))/ \
	        $(FUZZ_BUILD)/corpus-$$t tests/fuzz/corpus/$$t 2> $(FUZZ_LOGS)/$$t.log || exit 1; \
	done
	grep -H "stat::number_of_executed_units\|stat::average_exec_per_sec\|== finding" $(FUZZ_LOGS)/*.log

# Rewrite the committed seed corpora and the GGUF dictionary (after a schema change).
fuzz-corpus: venv
	$(BIN)/python tests/fuzz/make_corpus.py

# ---- ARM64: the cross build and its native suites under qemu-user (docs/arm64.md) --------------

# Debian's aarch64 cross compiler and qemu-user, only when missing (CI images run as root). A machine
# where they cannot be installed fails here, loudly: `make test ARM=0` is the explicit way round.
arm-deps:
	@if ! command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then \
	    echo "arm-deps: no aarch64-linux-gnu-g++ or qemu-aarch64; installing g++-aarch64-linux-gnu qemu-user (apt-get)"; \
	    { apt-get update -qq && apt-get install -y -qq --no-install-recommends g++-aarch64-linux-gnu qemu-user; } || { \
	        echo "arm-deps: FAILED to install the aarch64 cross compiler / qemu-user: the ARM64 suites cannot run" >&2; \
	        echo "arm-deps: install them (docs/arm64.md), or skip explicitly with: make test ARM=0" >&2; exit 1; }; \
	fi

# ggml, the engine and the native suites for aarch64 (no Python module; ggml for plain ARMv8-A).
arm-build: arm-deps venv
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/cmake -S . -B $(ARM_BUILD) -G Ninja \
	    -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DJEPA_NATIVE=OFF -DJEPA_BUILD_PYTHON=OFF -DJEPA_BUILD_TESTS=ON
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/cmake --build $(ARM_BUILD) -j$$(nproc)

# The native suites under qemu-aarch64 (the toolchain file's emulator): NEON by default, then the
# portable kernels and ggml's products; the stored x86 outputs bit for bit.
arm-test: arm-build
	$(BIN)/ctest --test-dir $(ARM_BUILD) --output-on-failure -j$$(nproc)

arm-skipped:
	@echo "WARNING: ARM=0: the aarch64 cross build and its emulated native suites were NOT run" >&2

# Rewrite tests/native/golden, the outputs test_stored_outputs holds every path to (x86 only: they
# are x86's bits, and ARM64 must give the same).
golden-outputs: install
	$(BUILD)/tests/native/test_stored_outputs --write

# ---- the GPU check (docs/gpu-check.md): everything a lent GPU machine's one call needs, made here -----

# The Python-independent CUDA core (ggml + its CUDA backend for sm_90 + libjepa) into build/cuda-core/dist:
# about an hour on 2 cores the first time, minutes when only the engine's sources changed.
cuda-core: venv
	GPU_CHECK_HOST_PYTHON=$(abspath $(BIN)/python) .ci/gpu_check.sh --build-core

# The same core without CUDA (build/cpu-core/dist), for the rehearsal's module build.
cpu-core: venv
	GPU_CHECK_HOST_PYTHON=$(abspath $(BIN)/python) .ci/gpu_check.sh --build-core --cpu

# build/gpu-carry: the wheels the GPU machine lacks and the reference bundles the suites read.
gpu-carry: venv
	GPU_CHECK_HOST_PYTHON=$(abspath $(BIN)/python) .ci/gpu_check.sh --prepare

# What the call would take along (<= 64 MiB), the core (sm_90, these sources) and the Python it meets.
gpu-dry-run: venv
	GPU_CHECK_HOST_PYTHON=$(abspath $(BIN)/python) .ci/gpu_check.sh --dry-run

# Every step of the check on this CPU (device cpu for cuda:0), the module built against build/cpu-core.
gpu-rehearse: install bench-deps
	GPU_CHECK_HOST_PYTHON=$(abspath $(BIN)/python) .ci/gpu_check.sh --rehearse --budget-s 3000

clean:
	rm -rf build $(VENV)
