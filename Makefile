# magnetar — the two commands a new machine needs are `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 6650
ADMIN_PORT ?= 8080
DATA_DIR ?= ./data

.PHONY: run test lint typecheck unit proto bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,spark]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/magnetar serve --port $(PORT) --admin-port $(ADMIN_PORT) --data-dir $(DATA_DIR)

test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/protocol tests/storage

# Regenerates the checked-in protobuf code; tests/protocol/test_generated_code.py fails when it is stale.
proto: $(STAMP)
	$(BIN)/python scripts/genproto.py

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
