# The two commands of the README:
#   make quickstart   set up .venv and run a real sweep (examples/quickstart.py)
#   make test         set up .venv and run ruff and the test suite
# Both create the virtual environment on first use. torch is installed first, from TORCH_SPEC, so that
# fluidsalus's own `torch` requirement is already met and pip never pulls a second (CUDA) build.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.fluidsalus-installed

.PHONY: quickstart test test-gpu lint bench-trivial bench-digits clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

quickstart: $(STAMP)
	$(BIN)/python examples/quickstart.py

lint: $(STAMP)
	$(BIN)/ruff check .

# pytest exits 5 when it collected no tests: that must fail, not pass silently.
test: lint
	$(BIN)/python -m pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

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
