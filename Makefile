# `make run` and `make test` set up what they need themselves (.venv, packages).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.stamp-install

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/arena up

lint: $(STAMP)
	$(BIN)/ruff check orchestrator tests
	$(BIN)/ruff format --check orchestrator tests
	$(BIN)/mypy orchestrator

test: lint
	$(BIN)/pytest

bench: $(STAMP)
	@set -e; found=0; for script in tests/bench/*.py; do \
		[ -f "$$script" ] || continue; \
		case "$$(basename $$script)" in _*|conftest.py) continue;; esac; \
		found=1; echo "== $$script"; $(BIN)/python "$$script"; \
	done; [ $$found = 1 ] || echo "no benchmarks in tests/bench yet"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
