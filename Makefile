# trainguard: two commands on a fresh machine.
#   make demo   installs, starts the local Kafka broker, runs the demo
#   make test   installs, starts the broker, runs the whole suite, stops the broker
#
# Everything installs into .venv (created with --system-site-packages, so a
# machine that already has torch reuses it instead of downloading it again).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TG := $(PY) -m trainguard.cli
STAMP := $(VENV)/.installed
# Subprocesses that call `trainguard` by name find the venv's console script.
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: install tools web-assets browser demo demo-console test unit integration broker-start broker-stop bench eval lint typecheck clean

$(PY):
	$(PYTHON) -m venv --system-site-packages $(VENV)

$(STAMP): pyproject.toml $(PY)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[train,test,lab,lightning,huggingface,bench]'
	if [ -d tests/plugins/sample_detector ]; then $(PY) -m pip install -q --disable-pip-version-check -e tests/plugins/sample_detector; fi
	touch $(STAMP)

install: $(STAMP) web-assets

# The console's charting library (uPlot) from npm into a gitignored folder; no CDN at run time.
web-assets:
	tools/install_web_assets.sh

# Debian's headless Chromium + chromedriver for the console's browser tests.
browser:
	tools/install_chromium.sh

# Real parts the deploy tests use: helm built from its Go module into the user cache, linked as .tools/bin/helm (once,
# a few minutes), Slurm and munge from Debian (once); valgrind from Debian (once), whose cachegrind
# bench_instructions and its test run. The scripts are idempotent.
tools:
	tools/helm.sh
	tools/slurm-install.sh
	tools/valgrind-install.sh

broker-start: install
	$(TG) broker start

broker-stop:
	-$(TG) broker stop

demo: install broker-start
	$(TG) demo

# The demo with the operator console kept open (prints its URL and tokens).
demo-console: install broker-start
	$(TG) demo --console --hold 600

test: install lint tools browser broker-start
	@status=0; $(PY) -m pytest tests || status=$$?; $(TG) broker stop; exit $$status

unit: install
	$(PY) -m pytest tests/unit

bench: install broker-start
	$(PY) -m benchmarks

# Lint and types before any test runs (make test depends on it): ruff's rules and mypy's
# disallow_untyped_defs, both configured in pyproject.toml and pinned in the test extra.
# trainguard holds every room (trainguard/<room> links to the top-level folders), so mypy sees each module once.
LINTED := trainguard benchmarks

lint: install
	$(VENV)/bin/ruff check .
	$(PY) -m mypy $(LINTED)

typecheck: install
	$(PY) -m mypy $(LINTED)

# Both scenario sets always run (a set that misses its targets exits 1, which must not hide the other's report).
eval: install
	@status=0; \
	$(TG) backtest-eval scenarios/evaluation-fleet --report out/eval-fleet || status=$$?; \
	$(TG) backtest-eval scenarios/evaluation --report out/eval || status=$$?; \
	exit $$status

clean:
	-$(TG) broker stop
	rm -rf .trainguard build *.egg-info $(VENV)
