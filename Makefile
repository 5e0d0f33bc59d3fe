# The two commands of the README: `make run` (the server, on the demo model unless MODEL=...)
# and `make test` (builds everything and runs every native and Python test).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BUILD  := build/dev
MODEL  ?=
ARGS   ?=

.PHONY: run test install venv bench-deps native-test py-test lint clean

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

test: install bench-deps
	$(MAKE) native-test py-test lint

# The test requirements and the benchmarks' peers (the tests run every benchmark's smoke mode).
bench-deps: venv
	$(BIN)/pip install --quiet -r requirements/bench.txt
	$(BIN)/pip install --quiet --no-deps -r requirements/bench-nodeps.txt

native-test:
	$(BIN)/ctest --test-dir $(BUILD) --output-on-failure

py-test:
	$(BIN)/python -m pytest -q

# ruff on the whole tree; mypy on python/jepa and server/jepa_server ([tool.mypy] in pyproject.toml).
lint:
	$(BIN)/ruff check python server tests tools
	$(BIN)/mypy

clean:
	rm -rf build $(VENV)
