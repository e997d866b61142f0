# Two commands on a fresh machine: `make demo` and `make test`.
# Both (re)build .venv when it is missing or older than pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test slurm readers netfs lint typecheck pytest docs bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/iorch run bips3d --out out/demo

test: $(STAMP) slurm readers netfs lint typecheck pytest docs

# Debian packages of a single-node Slurm for the tests (they start the daemons)
slurm:
	.ci/setup-slurm

# Debian's HDF5 tools (h5dump, h5ls) for the reader conformance tests
readers:
	.ci/setup-readers

# Debian's socat, sshfs and sftp-server: a testbed's network file system
netfs:
	.ci/setup-netfs

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy orchestrator plugins workflows

pytest: $(STAMP) slurm readers netfs
	$(BIN)/python -m pytest

docs: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

bench: $(STAMP)
	$(BIN)/iorch bench schedulers --out out/bench
	$(BIN)/iorch bench optimal --out out/bench-optimal
	$(BIN)/iorch bench idg --out out/bench-idg
	$(BIN)/iorch bench stage --out out/bench-stage

clean:
	rm -rf docs/_build docs/_generated out .pytest_cache .mypy_cache .ruff_cache
