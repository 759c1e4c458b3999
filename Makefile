# cutover: everyday commands. Every target builds .venv first when it is missing or older
# than pyproject.toml, so a fresh clone needs only `python3` (3.11+) and `make`.
#
#   make test    ruff, import-linter, mypy, then every test tier on 2 workers (pytest-xdist;
#                PYTEST_ARGS="-k foo -x" to narrow it, PYTEST_WORKERS=0 for one process)
#   make check   the fast loop before each commit: lint, then the unit tier (under 90 s)
#   make lint    ruff, import-linter and mypy only
#   make test-every-backend   every test on SQLite and on PostgreSQL (the nightly run)
#   make soak    500 predictions under injected faults, both backends (minutes)
#   make demo    the real replicate client -> cutover (HTTPS) -> a real Cog server
#   make demo-migration  a route moved between two real Cog servers: shadow, report,
#                canary 10 -> 50 -> 100, a forced failure, the guard's rollback (1-2 min)
#   make demo-translation  a route moved from real Cog to a fal-shaped candidate with maps:
#                every shadow pair a contract break without them, 0 with them (1 min)
#   make bench   every bench/*.py, if there are any
#   make chaos   the chaos run: 1,000 predictions under faults (CHAOS_ARGS="--predictions 200")
#   make clean   caches, build output and the demo's work dir (.venv stays: `make distclean`)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# Test workers (pytest-xdist): one per core; a file's tests stay on one worker, so a
# module's fixtures (a gateway process, a Cog server) start once (docs/testing.md).
PYTEST_WORKERS ?= auto
XDIST := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)
CHAOS_ARGS ?= --predictions 1000

# The venv's tools come first: the Cog server's worker finds `python` on PATH.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export VIRTUAL_ENV := $(CURDIR)/$(VENV)
unexport PYTHONHOME

.PHONY: venv test check lint pytest test-every-backend soak demo demo-migration demo-translation \
  bench chaos clean distclean

venv: $(STAMP)

$(BIN)/python:
	@echo "== creating $(VENV) with $$(command -v $(PYTHON)) ($$($(PYTHON) --version))"
	$(PYTHON) -m venv $(VENV)

# Re-installs when pyproject.toml is newer than the stamp (new dependency, new script).
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "== installing cutover and its dev extra into $(VENV) (log: $(VENV)/install.log)"
	@$(BIN)/python -m pip install -e '.[dev]' >$(VENV)/install.log 2>&1 \
	  || { tail -40 $(VENV)/install.log; echo "== pip install failed"; exit 1; }
	touch $@

lint: $(STAMP)
	@echo "== ruff"
	$(BIN)/ruff check .
	@echo "== import-linter"
	$(BIN)/lint-imports
	@echo "== mypy (contracts, adapters, gateway)"
	$(BIN)/mypy

pytest: $(STAMP)
	@echo "== pytest (every tier: unit, integration, acceptance, soak)"
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

test: lint pytest

check: lint
	@echo "== pytest -m unit"
	$(BIN)/python -m pytest $(XDIST) -m unit -q $(PYTEST_ARGS)

# Every test on every backend, not only those marked every_backend (minutes more).
test-every-backend: $(STAMP)
	CUTOVER_TEST_EVERY_BACKEND=1 $(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

# 500 predictions under injected store and adapter faults, on every backend (minutes).
soak: $(STAMP)
	CUTOVER_SOAK=1 $(BIN)/python -m pytest tests/integration/test_faults_soak.py $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

demo-migration: $(STAMP)
	$(BIN)/python examples/migration.py

demo-translation: $(STAMP)
	$(BIN)/python examples/translation.py

bench: $(STAMP)
	@shopt -s nullglob; scripts=(bench/*.py); \
	if (( $${#scripts[@]} == 0 )); then echo "== no bench/*.py yet: nothing to run"; exit 0; fi; \
	for script in "$${scripts[@]}"; do echo "== $$script"; $(BIN)/python "$$script"; done

chaos: $(STAMP)
	$(BIN)/cutover chaos $(CHAOS_ARGS)

clean:
	rm -rf .demo .demo-migration .demo-translation build dist .pytest_cache .ruff_cache .hypothesis .mypy_cache .import_linter_cache \
	  *.egg-info
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV)
