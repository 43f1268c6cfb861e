# Quick start: `make run` (set up + serve, embedded SQLite), `make test` (set up + all tests).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-fast lint check-migrations bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch is pinned first, by pip (a local CPU wheel here, found through pip's own configuration);
# the project's range then installs nothing more. The rest is installed by uv, which fetches in
# parallel (17 s here against pip's 39 s, the same packages and versions); pip again if uv fails.
# Both write the packages' bytecode at install, as pip does by default: uv does not unless told, and
# where the environment sets PYTHONDONTWRITEBYTECODE no process writes it later, so every process
# (each service, worker and CLI a test starts; each sandboxed child) compiled numpy, scipy,
# sklearn, fastapi and the rest from source at every import (`import app.main`: 4.9 -> 2.7 CPU-s).
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q uv
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[all,test]' || $(BIN)/pip install -q -e '.[all,test]'
	touch $(STAMP)

install: $(STAMP)

run: install
	bash scripts/system_deps.sh sandbox
	$(BIN)/ideabench migrate
	$(BIN)/ideabench serve

# The four checks run side by side (each is one process; two cores halve their wall time); the
# strict run keeps its own cache, so neither overwrites the other's.
LINTS := lint-ruff lint-mypy lint-mypy-strict lint-imports
.PHONY: $(LINTS)
lint: install
	$(MAKE) --no-print-directory -j4 --output-sync=target $(LINTS)
lint-ruff:
	$(BIN)/ruff check .
lint-mypy:
	$(BIN)/mypy
lint-mypy-strict:
	$(BIN)/mypy --strict --cache-dir .mypy_cache/strict bench
lint-imports:
	$(BIN)/lint-imports

check-migrations: install
	bash scripts/check_migrations.sh

# The tests' own processes (pytest's workers, the services and workers they start) write the
# project's bytecode even where the environment says not to: the first import of each module
# compiles it once, not once per process (the sandboxed children only read it).
test: install
	bash scripts/system_deps.sh
	$(MAKE) lint
	$(MAKE) check-migrations
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -ra -n 2 --dist loadscope --durations=30

test-fast: install
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -m "not slow" -n 2 --dist loadscope

bench: install
	$(BIN)/python benchmarks/protocol_speed.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
