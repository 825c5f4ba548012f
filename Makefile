# `make demo` and `make test` bootstrap .venv themselves on a fresh machine (idempotent: the stamp
# is keyed on pyproject.toml and the pinned CPU set, so a second run installs nothing).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# Tests run on XDIST pytest-xdist workers (the test Slurm cluster's tests on one of them: --dist loadgroup;
# in collection order, which puts the minutes-long tests first);
# `make test XDIST=0` runs them in one process. Three workers on a 2-core machine: the tests wait a good part of
# their time (subprocess starts, Slurm's queue, gloo rendezvous), so a third one fills the idle core-time.
XDIST ?= 3
XDIST_ARGS := $(if $(filter 0,$(XDIST)),,-n $(XDIST) --dist loadgroup --no-loadscope-reorder)

.PHONY: demo demo-real test lint venv bench clean
venv: $(STAMP)

$(STAMP): pyproject.toml constraints-cpu.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "[midtrain] installing the pinned CPU set into $(VENV) (first run only)"
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r constraints-cpu.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/midtrain demo

# the real-model experiment (docs/real_model.md): SmolLM2-135M through the paper's comparison, ~50 min on 2 AVX2 cores
demo-real: $(STAMP)
	$(VENV)/bin/midtrain demo --model smollm2

# ruff (lint + import order, then the formatter's check) on the whole tree, mypy on midtrain/, recipes/, tests/,
# bench/ and data_prep/ (pyproject.toml [tool.ruff], [tool.mypy]): ruff under a second; mypy ~25 s CPU on its
# first run (reading torch's types), a few seconds with its .mypy_cache. `.venv/bin/ruff format .` formats the tree.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy

test: $(STAMP) lint
	$(PY) -m pytest $(XDIST_ARGS) $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .demo .demo-real build *.egg-info
