# The two commands a newcomer runs: `make demo` and `make test`. Both create or reuse .venv.
# The test tiers print their 20 slowest tests; JUNIT=DIR also writes DIR/<tier>.xml (.ci/run's closing report).
# CI must stay under 45 minutes on 2 cores: docs/testing.md says what each tier costs and why.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# pytest-xdist processes per tier (docs/testing.md: measured on the 2-core machine). Each test module runs in one
# process (--dist loadfile), so a module's shared fixtures start once; modules go out in collection order, which
# tests/conftest.py starts with the longest (xdist's default order is by test count).
# Where the environment sets PYTHONDONTWRITEBYTECODE (CI's sandbox does), every process a tier starts (xdist
# workers, CLI subprocesses, Ray workers) compiled grokray's and the tests' sources again: 0.33 s for grokray's 139
# files. pip compiled site-packages at install; our own bytecode goes to the (ignored) __pycache__ folders.
unexport PYTHONDONTWRITEBYTECODE

TEST_WORKERS ?= -n 2 --dist loadfile --no-loadscope-reorder
LAUNCH_WORKERS ?= -n 2 --dist loadfile --no-loadscope-reorder
LIBRARY_WORKERS ?= -n 2 --dist loadfile --no-loadscope-reorder
RELIABILITY_WORKERS ?= -n 3 --dist load

.PHONY: demo test test-slow launches library reliability atlas lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: where pip is offered a CPU build of it (CI, the dev machines) nothing pulls a CUDA
	# build; on plain PyPI this is the default (CUDA) wheel: see the README for the CPU index.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

# DEMO_SCALE=smoke: the quickstart's 300-step preset, the same commands in under a minute (tests/test_readme.py)
demo: $(STAMP)
	$(BIN)/grokray run sweeps/quickstart.yaml$(if $(DEMO_SCALE), --scale $(DEMO_SCALE))
	$(BIN)/grokray analyze --experiment quickstart -o grokray-results/quickstart-figures
	@echo "phase diagram: grokray-results/quickstart-figures/phase_diagram.png"

lint: $(STAMP)
	$(BIN)/ruff check .

# pytest's exit code 5 (no tests collected) is not a failure.
PYTEST = $(BIN)/python -m pytest -q -p no:cacheprovider --durations=20 $(if $(JUNIT),--junitxml=$(JUNIT)/$@.xml)
OK_IF_EMPTY = rc=$$?; [ $$rc -eq 5 ] && exit 0 || exit $$rc

test: $(STAMP) lint
	$(PYTEST) $(TEST_WORKERS); $(OK_IF_EMPTY)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# The end-to-end launches of the sweep layer (grid, search, adaptive, atlas, a two-node cluster) on a real local Ray.
launches: $(STAMP)
	$(PYTEST) $(LAUNCH_WORKERS) -m 'launch and not slow'; $(OK_IF_EMPTY)

library: $(STAMP)
	$(PYTEST) $(LIBRARY_WORKERS) -m 'library and not slow'; $(OK_IF_EMPTY)

# Every figure of sweeps/ at SCALE (smoke, reduced or paper), pages in docs/atlas; run again to resume.
SCALE ?= reduced
atlas: $(STAMP)
	$(BIN)/grokray atlas --scale $(SCALE) $(SPECS)

reliability: $(STAMP)
	$(PYTEST) $(RELIABILITY_WORKERS) -m 'reliability and not slow'; $(OK_IF_EMPTY)

clean:
	rm -rf $(VENV) mlruns mlflow.db grokray-results
