# `make run` and `make test` work on a fresh machine: they create .venv and
# install what they need. Everything else is a convenience for developers.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: run test lint typecheck fmt bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-* && touch $@

run: $(STAMP)
	$(BIN)/faultline run $(ARGS)

# Tests on simulated time or on none (no wall clock, real process, Docker or
# Spark) run two at a time with pytest-xdist, worksteal so that one worker
# never waits on the other's queue of long simulations. The rest run one at a
# time after them, so no test timed by the wall clock shares the two cores.
# tests/conftest.py fails a test the parallel half should not hold (marked
# docker, spark_cluster or browser, or running real nodes).
# Both halves run even if the first fails. PYTEST_ARGS runs pytest once,
# serially, with those arguments.
PARALLEL_TESTS := tests/sim tests/explore tests/checkers tests/raft

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
ifeq ($(strip $(PYTEST_ARGS)),)
	$(BIN)/python -m pytest -n 2 --dist worksteal $(PARALLEL_TESTS); first=$$?; \
	$(BIN)/python -m pytest $(addprefix --ignore=,$(PARALLEL_TESTS)); second=$$?; \
	exit $$(( first ? first : second ))
else
	$(BIN)/python -m pytest $(PYTEST_ARGS)
endif

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
