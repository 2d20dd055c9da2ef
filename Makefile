# Two entry points: `make demo` and `make test` (`make test-slow` runs the slow end-to-end tests; CI runs both). Each creates .venv when it is missing and
# installs everything (`.[all,test]`) at the versions pinned in constraints.txt, with uv; `pip install caption-debias` alone is the
# data-only core.
# `make test` runs the test files on every core (pytest-xdist, a file per worker: its module fixtures are made once).
# `make lint` is the ruff gate (check + format) and the type checker (mypy over every module of caption_debias/ and
# cli/: [tool.mypy] in pyproject.toml) that CI runs before the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint format install clean

# The install is uv's `pip install`, the same pins as pip's in a third of the time or less (docs/benchmarks.md,
# "Test suite"): pip installs uv into the venv, and pip's own index settings are handed on to uv, which does not read
# pip's configuration (--index-strategy unsafe-best-match is pip's rule: the best version across all indexes). uv does
# not compile bytecode at install as pip does; each module is compiled when first imported and kept, so make's
# commands write bytecode even where PYTHONDONTWRITEBYTECODE is set outside (else every fresh interpreter would
# compile torch again).
export PYTHONDONTWRITEBYTECODE =
PIP_SETTING = $(shell $(PYTHON) -m pip config get global.$(1) 2>/dev/null)
UV_INDEXES = $(addprefix --index-url ,$(call PIP_SETTING,index-url)) \
	$(addprefix --extra-index-url ,$(call PIP_SETTING,extra-index-url)) \
	$(addprefix --find-links ,$(call PIP_SETTING,find-links))

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c constraints.txt uv
	$(BIN)/uv pip install -q --python $(BIN)/python --index-strategy unsafe-best-match \
		$(UV_INDEXES) -c constraints.txt -e ".[all,test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/caption-debias demo --out demo-out

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" -n auto --dist loadfile

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) demo-out build *.egg-info
