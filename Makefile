# The two commands of the README:
#   make quickstart   set up .venv and run a real sweep (examples/quickstart.py)
#   make test         set up .venv and run ruff and the test suite
# Both create the virtual environment on first use. torch is installed first, from TORCH_SPEC, so that
# fluidsalus's own `torch` requirement is already met and pip never pulls a second (CUDA) build. Every other
# package comes at the version pinned in CONSTRAINTS (the set the suite passed with, with the default torch);
# `CONSTRAINTS=` installs the newest releases pyproject.toml's ranges allow instead.

PYTHON ?= python3
VENV ?= .venv
TESTED_TORCH_SPEC := torch==2.13.0
TORCH_SPEC ?= $(TESTED_TORCH_SPEC)
# The pins were tested with TESTED_TORCH_SPEC; with another torch they may clash with its own requirements
# (sympy, networkx, ...), so then the ranges decide.
CONSTRAINTS ?= $(if $(filter $(TESTED_TORCH_SPEC),$(TORCH_SPEC)),constraints.txt)
PIP_CONSTRAINT_ARGS := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
LATEST_VENV := .venv-latest
BIN := $(VENV)/bin
STAMP := $(VENV)/.fluidsalus-installed

.PHONY: quickstart test test-seconds test-gpu test-latest lock lint bench-trivial bench-digits clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(PIP_CONSTRAINT_ARGS) "$(TORCH_SPEC)"

$(STAMP): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet $(PIP_CONSTRAINT_ARGS) -e ".[test]"
	touch $(STAMP)

quickstart: $(STAMP)
	$(BIN)/python examples/quickstart.py

lint: $(STAMP)
	$(BIN)/ruff check .

# The suite runs in TEST_WORKERS pytest processes (pytest-xdist; whole files each, `--dist loadfile`, as a file's
# tests share its module state), each with its own small Ray. A serial run's time partly waits (device actors
# starting, trials' reports, timeouts): on the 2-core CI machine, the same morning, two processes took 522 s and
# 605 s (a fresh-clone CI) where one took 729 s; three took 528 s where two took 558 s the same hour (the CPU is
# what bounds it then) and a console test failed under the load. TEST_WORKERS=0 runs it in one process.
# The files go out longest first, by the seconds tests/file_seconds.json holds (tests/conftest.py; xdist's own
# order, by the number of tests per file, is turned off): `make test-seconds` measures them anew.
TEST_WORKERS ?= 2
PYTEST_WORKER_ARGS := $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# Python's bytecode cache is written (PYTHONDONTWRITEBYTECODE emptied; __pycache__ is ignored by git): where the
# environment sets it, as this project's CI machines do, every process the suite starts (the pytest processes, each
# device actor, each example) compiled fluidsalus's and the tests' sources anew.
PYTEST_ENV := PYTHONDONTWRITEBYTECODE=

# pytest exits 5 when it collected no tests: that must fail, not pass silently.
test: lint
	$(PYTEST_ENV) $(BIN)/python -m pytest $(PYTEST_WORKER_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

# Measures each test file's seconds (a JUnit report of one `make test` run) and writes tests/file_seconds.json.
test-seconds: lint
	$(PYTEST_ENV) $(BIN)/python -m pytest $(PYTEST_WORKER_ARGS) --junitxml=$(VENV)/suite-seconds.xml || true
	$(BIN)/python tests/_file_seconds.py $(VENV)/suite-seconds.xml

# The suite on the newest dependency releases pyproject.toml allows, in a separate virtual environment: what a
# user who runs `pip install fluidsalus` today gets. It catches a breaking release before the pins are moved.
test-latest:
	rm -rf $(LATEST_VENV)
	$(MAKE) test VENV=$(LATEST_VENV) CONSTRAINTS=

# Moves the pins: runs test-latest and, only if it passes, writes that environment (less torch and fluidsalus
# itself) to constraints.txt, each line marked with the Python version it was tested on.
lock: test-latest
	ver=$$($(LATEST_VENV)/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	{ grep '^#' constraints.txt; \
	  $(LATEST_VENV)/bin/python -m pip freeze --exclude-editable | grep -v -i '^torch==' \
	    | sed "s/\$$/ ; python_version == \"$$ver\"/"; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# On a machine with a CUDA GPU: the GPU tests (they are skipped elsewhere) and the lane benchmark on the GPU.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_allocator_cuda.py -rs
	$(BIN)/python benchmarks/lanes.py --device cuda

bench-trivial: $(STAMP)
	$(BIN)/python benchmarks/compare.py --sweep trivial

bench-digits: $(STAMP)
	$(BIN)/python benchmarks/compare.py --sweep digits

clean-venv:
	rm -rf $(VENV)
