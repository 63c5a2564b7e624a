# magnetar — the two commands a new machine needs are `make run` and `make test`.
#   make run [PORT=6650] [ADMIN_PORT=8080] [DATA_DIR=./data]   a broker, runtime only
#   make test                                                   ruff, mypy and the tests
#   make dist                                                   sdist and wheel in dist/
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two stamps in one venv: installing the test extras also satisfies the runtime, so
# `make run` after `make test` installs nothing, and `make test` after `make run` adds
# the extras. A changed pyproject.toml makes both stale.
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test
BUILD_STAMP := $(VENV)/.installed-build
PORT ?= 6650
ADMIN_PORT ?= 8080
DATA_DIR ?= ./data

.PHONY: run test lint typecheck unit proto bench dist clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The broker, client, CLI and pytest plugin with their runtime dependencies only.
$(RUNTIME_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# Everything the tests, linters and the Spark data source need, on top.
$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,spark]'
	touch $@ $(RUNTIME_STAMP)

$(BUILD_STAMP): | $(BIN)/python
	$(BIN)/python -m pip install --quiet build
	touch $@

run: $(RUNTIME_STAMP)
	$(BIN)/magnetar serve --port $(PORT) --admin-port $(ADMIN_PORT) --data-dir $(DATA_DIR)

test: $(TEST_STAMP) lint typecheck
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(TEST_STAMP)
	$(BIN)/ruff check src tests benchmarks examples

typecheck: $(TEST_STAMP)
	$(BIN)/mypy

unit: $(TEST_STAMP)
	$(BIN)/python -m pytest -q tests/protocol tests/storage

# Regenerates the checked-in protobuf code; tests/protocol/test_generated_code.py fails when it is stale.
proto: $(TEST_STAMP)
	$(BIN)/python scripts/genproto.py

bench: $(TEST_STAMP)
	$(BIN)/python benchmarks/run_all.py

# dist/magnetar-<version>.tar.gz and dist/magnetar-<version>-py3-none-any.whl
dist: $(BUILD_STAMP)
	rm -rf dist
	$(BIN)/python -m build --quiet --outdir dist .

clean:
	rm -rf $(VENV) build dist src/*.egg-info
