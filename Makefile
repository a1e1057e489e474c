# The two commands: `make run` (dispatcher on the embedded broker), `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
# Test processes side by side: most of a test's time is spent waiting on brokers, workers and
# receivers, not on a core. Each process has its own embedded broker; a module's tests stay together.
# Two fit the 2-core machines the suite is measured on; TEST_JOBS=1 runs it in one process.
TEST_JOBS ?= 2

.PHONY: run test lint install bytecode clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# The tree's bytecode, written now: where PYTHONDONTWRITEBYTECODE is set (CI, containers) every
# worker start would compile the modules it imports again (what that cost: docs/benchmarks.md);
# the image compiles them when it is built. Only changed files are rewritten.
# The same packages as `bench.suite.precompile`.
bytecode: install
	$(BIN)/python -m compileall -q dispatcher web bench >/dev/null

run: bytecode
	$(BIN)/webhook-dispatcher dev

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy dispatcher web

test: bytecode
	$(BIN)/ruff check .
	$(BIN)/mypy dispatcher web
	$(BIN)/python -m pytest -q -rs -n $(TEST_JOBS) --dist loadfile --hypothesis-show-statistics

bench: install  # python -m bench writes the bytecode itself (bench/suite.py, precompile)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) data .pytest_cache
	find dispatcher web bench tests -name __pycache__ -prune -exec rm -rf {} +
