# Two entry points (see README): `make study` and `make test`. Both create .venv and install dmllab on first use
# and are no-ops for set-up afterwards (the stamp file is newer than pyproject.toml).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.dmllab-installed
PROFILE ?= quick
JOBS ?= auto

.PHONY: setup study test lint bench lab clean-results

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing dmllab and its dependencies into $(VENV) (first time: a few minutes)"
	@$(BIN)/python -m pip install -q -e ".[dev]" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
	@touch $(STAMP)

study: setup
	$(BIN)/dmllab study --profile $(PROFILE) --jobs $(JOBS)
	@echo "Figure report: figures/report.html"

test: setup
	$(BIN)/python -m pytest

# JupyterLab on notebooks/ (as root too); a save never writes into a committed notebook (dmllab/pipeline/lab.py)
lab: setup
	$(BIN)/python -m dmllab.pipeline.lab

lint: setup
	$(BIN)/ruff check dmllab tests benchmarks

bench: setup
	$(BIN)/python benchmarks/bench_evaluator.py
	$(BIN)/python benchmarks/bench_data.py
	$(BIN)/python benchmarks/bench_trainer.py

.PHONY: docs
docs: setup
	$(BIN)/dmllab docs
