# Quick start: `make run` (set up + serve, embedded SQLite), `make test` (set up + all tests).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-fast lint check-migrations bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch is pinned first (a local CPU wheel here); the project's range then installs nothing more.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[all,test]'
	touch $(STAMP)

install: $(STAMP)

run: install
	bash scripts/system_deps.sh sandbox
	$(BIN)/ideabench migrate
	$(BIN)/ideabench serve

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/mypy --strict bench
	$(BIN)/lint-imports

check-migrations: install
	bash scripts/check_migrations.sh

test: install
	bash scripts/system_deps.sh
	$(MAKE) lint
	$(MAKE) check-migrations
	$(BIN)/pytest -q -ra -n 2 --dist loadscope

test-fast: install
	$(BIN)/pytest -q -m "not slow" -n 2 --dist loadscope

bench: install
	$(BIN)/python benchmarks/protocol_speed.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
