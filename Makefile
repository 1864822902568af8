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

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest $(PYTEST_ARGS)

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
