# Two entry points, each creating .venv on first use:
#   make run   installs everything and runs the default suite on the embedded models
#   make test  installs everything and runs the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,hf]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/appliance run

test: install
	$(BIN)/ruff check appliance tests
	$(BIN)/mypy
	$(BIN)/pytest -q

lint: install
	$(BIN)/ruff check appliance tests
	$(BIN)/ruff format --check appliance tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info
