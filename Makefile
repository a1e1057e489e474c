# The two commands: `make run` (dispatcher on the embedded broker), `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test lint install clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

run: install
	$(BIN)/webhook-dispatcher dev

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy dispatcher web

test: install
	$(BIN)/ruff check .
	$(BIN)/mypy dispatcher web
	$(BIN)/python -m pytest -q -rs --hypothesis-show-statistics

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) data .pytest_cache
