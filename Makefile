# rota: two commands for a newcomer.
#   make demo   bootstrap .venv and run the demo on an embedded SQLite store
#   make test   bootstrap .venv and run every quality gate and the whole suite
#   make soak   the long reliability trials at the matrix's scale (not part of make test)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
LAYERS := rota domain projections application infrastructure replay
# Re-link the strict editable install whenever a package folder gains or loses a file (and
# rebuild the shell wrapper when its C source changes).
LAYER_DIRS := $(shell find $(LAYERS) -type d -not -name __pycache__ 2>/dev/null)

.PHONY: demo test soak lint typecheck pytest bench clean

$(BIN)/.deps: requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	@touch $@

# Strict editable mode links every module into the package layout (rota/domain -> domain/),
# so mypy and the interpreter both see `rota.domain` and nothing installs `domain`.
$(BIN)/.installed: $(BIN)/.deps pyproject.toml setup.py infrastructure/executors/wrapper.c $(LAYER_DIRS)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation \
		-e . --config-settings editable_mode=strict
	@touch $@

demo: $(BIN)/.installed
	$(BIN)/python -P -m rota.demo

# The code folders only: Python examples in docs/ are prose, checked by the tests that run them.
CODE := rota domain projections application infrastructure replay tests bench setup.py

lint: $(BIN)/.installed
	$(BIN)/ruff check $(CODE)
	$(BIN)/ruff format --check $(CODE)

# Every product package, strict, with the pydantic plugin (both set in pyproject.toml).
typecheck: $(BIN)/.installed
	$(BIN)/mypy -p rota.domain -p rota.projections -p rota.application -p rota.infrastructure \
		-p rota.replay -p rota

# The suite mostly waits (subprocesses, daemons, fsyncs), so it runs on three workers even on
# two cores (pytest-xdist); PYTEST_WORKERS=0 runs it in this process, one test at a time.
PYTEST_WORKERS ?= 3
pytest: $(BIN)/.installed
	$(BIN)/pytest -n $(PYTEST_WORKERS)

# The reliability matrix at full scale (tests/trial_scale.py, docs/testing.md): 200 crash
# trials, 5-minute PostgreSQL races, 500 clock-jump and projection sequences, 1,000 fuzz
# examples per parser, 300 simulator seeds, every mutant, each failover drill on a primary
# and replica of its own (tests/failover). Not part of make test.
SOAK_TESTS := tests/integration/test_crash.py tests/integration/test_postgres_scheduler.py \
	tests/integration/test_recover_corrupt.py tests/integration/test_projection_property.py \
	tests/integration/test_projection_store.py tests/integration/test_clock_jump.py \
	tests/integration/test_schedule_clock_jumps.py tests/integration/test_cli_fuzz.py \
	tests/sim/test_simulator.py tests/sim/test_mutants.py tests/failover/test_drills.py
# ... and the simulator on 500 fresh seeds, each failing seed written as a regression case.
soak: $(BIN)/.installed
	ROTA_SOAK=1 $(BIN)/pytest -n $(PYTEST_WORKERS) $(SOAK_TESTS)
	$(BIN)/python -P -m rota.testing.sim --seeds 500 --fresh --regressions tests/sim/regressions

test: lint typecheck pytest

bench: $(BIN)/.installed
	$(BIN)/python -m bench.append
	$(BIN)/python -m bench.read

clean:
	rm -rf $(VENV) build *.egg-info demo-data
