# Two entry points, each creating .venv on first use:
#   make run   installs everything and runs the default suite on the embedded models
#   make test  installs everything and runs the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install browser run test chaos lint clean calibrations

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,hf]'
	touch $(STAMP)

install: $(STAMP)

# The page tests drive Debian's chromium. It is installed here when missing and this user may
# (root with apt-get); otherwise those tests skip and print why.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium and chromium-driver for the browser tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
			|| echo "chromium could not be installed: the browser tests will be skipped"; \
	else echo "chromium is missing and only root can install it here: the browser tests will be skipped"; fi

run: install
	$(BIN)/appliance run

test: install browser
	$(BIN)/ruff check appliance tests
	$(BIN)/mypy
	$(BIN)/pytest -q

# Every family's scripted run killed with SIGKILL 20 times and resumed (the suite kills each once).
chaos: install
	CHAOS_KILLS=20 $(BIN)/pytest -q -s tests/test_chaos.py

lint: install
	$(BIN)/ruff check appliance tests
	$(BIN)/ruff format --check appliance tests
	$(BIN)/mypy

# Regenerate the default panel's shipped calibrations (judges/calibrations/default/) from the human
# labels in ../shared: with turn_followups (the default panel's template), FED turn level Overall
# (which runs apply to PingPong) and Relevant; with turn_likelihood (8 follow-ups, a baseline after
# the conversation alone), FED Overall and Relevant and USR Overall. About 100 minutes on 2
# cores with nothing else running; features are stored, so a second criterion of the same set and
# template costs a minute.
LABELS := ../shared/datasets/human_labels
CALDB := out/calibrations.duckdb
SHIP := --panel default --ship --db $(CALDB)
calibrations: install
	mkdir -p out
	$(BIN)/appliance labels import $(LABELS)/fed/fed_data.json --format fed --db $(CALDB)
	$(BIN)/appliance labels import $(LABELS)/usr_personachat/pc_usr_data.json --format usr --db $(CALDB)
	$(BIN)/appliance calibrate --labels fed-turn --criterion Overall --template turn_followups $(SHIP)
	$(BIN)/appliance calibrate --labels fed-turn --criterion Relevant --template turn_followups $(SHIP)
	$(BIN)/appliance calibrate --labels fed-turn --criterion Overall --template turn_likelihood $(SHIP)
	$(BIN)/appliance calibrate --labels fed-turn --criterion Relevant --template turn_likelihood $(SHIP)
	$(BIN)/appliance calibrate --labels usr-personachat --criterion Overall --template turn_likelihood $(SHIP)

clean:
	rm -rf $(VENV) build *.egg-info
