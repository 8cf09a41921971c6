# The two commands a newcomer runs: `make demo` and `make test`. Both create or reuse .venv.
# The test tiers print their 20 slowest tests: CI must stay under 60 minutes, and this says where it goes.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow library reliability atlas lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: where pip is offered a CPU build of it (CI, the dev machines) nothing pulls a CUDA
	# build; on plain PyPI this is the default (CUDA) wheel: see the README for the CPU index.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/grokray run sweeps/quickstart.yaml
	$(BIN)/grokray analyze --experiment quickstart -o grokray-results/quickstart-figures
	@echo "phase diagram: grokray-results/quickstart-figures/phase_diagram.png"

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) lint
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=20; rc=$$?; [ $$rc -eq 5 ] && exit 0 || exit $$rc

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

library: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=20 -m 'library and not slow'; rc=$$?; [ $$rc -eq 5 ] && exit 0 || exit $$rc

# Every figure of sweeps/ at SCALE (smoke, reduced or paper), pages in docs/atlas; run again to resume.
SCALE ?= reduced
atlas: $(STAMP)
	$(BIN)/grokray atlas --scale $(SCALE) $(SPECS)

reliability: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=20 -m 'reliability and not slow'; rc=$$?; [ $$rc -eq 5 ] && exit 0 || exit $$rc

clean:
	rm -rf $(VENV) mlruns mlflow.db grokray-results
