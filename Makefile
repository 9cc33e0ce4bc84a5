# Two entry points for a fresh machine with only Python: `make demo` and `make test`;
# `make test-fast` is the edit loop's tier (in-process tests only, no `processes` or `slow` ones).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/hetsplit demo

test: $(STAMP)
	$(PY) -m pytest -q --durations=25

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not processes and not slow"

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
