# Two entry points for a fresh machine: `make demo` and `make test`.
# Each builds the virtual environment first (uv, from PyPI; torch and the rest
# come from uv's cache after the first time, so a warm rebuild takes seconds).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: env demo test bench clean
env: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(BIN)/python -m pip install -q --disable-pip-version-check uv
	VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/uv pip install -q -e '.[train,dev]'
	@touch $@

demo: $(STAMP)
	$(BIN)/ai4dl demo

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/bench_core.py

clean:
	rm -rf $(VENV) ai4dl-demo
