# The workbench's entry points.  Every target sets up .venv first; nothing to activate by hand.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup peers browser demo test test-long campaign bench sim java lint clean-data help

help:
	@echo "make demo      set up, then the workbench in ~3 minutes: a run killed with SIGKILL and recovered exactly once, push-up, 16 cores simulated - in a report"
	@echo "make test      set up and run the test suite (CI runs it, then make test-long)"
	@echo "make test-long the long end-to-end tests: every notebook at the tiny scale, the Spark cluster, JupyterLab in a browser (~10 min)"
	@echo "make campaign  the test suite with every cell of the kill and crash matrices and the Spark cluster's whole plan (~1 h)"
	@echo "make bench     set up and print the benchmark figures (datagen, engine vs Spark, ingest, checkpoints, codecs, Kafka++, peers side by side, aligned checkpoints, Spark local vs cluster)"
	@echo "make sim       set up, calibrate the simulator on this machine (experiments/calibration.json) and validate it against the engine"
	@echo "make setup     only create .venv and install (checks Python 3.11+ and Java 17+)"
	@echo "make peers     install the peers: RabbitMQ (apt-get, needs root) and PyFlink in .venv-flink"
	@echo "make browser   install Chromium and chromedriver for the browser tests (apt-get, needs root)"
	@echo "make java      install a Java 17 runtime with apt-get (Debian/Ubuntu, needs root)"

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh scripts/compile-kernels.sh
	scripts/setup.sh
	scripts/compile-kernels.sh
	@touch $(STAMP)

# the peers run beside the engine in the tests and benchmarks: RabbitMQ (apt), PyFlink (.venv-flink)
peers:
	scripts/setup-peers.sh

# the browser tests drive JupyterLab in headless Chromium (Debian's chromium, chromium-driver)
browser:
	scripts/setup-browser.sh

# a kill recovered exactly once, push-up explained and measured, 16 cores simulated: a report
demo: setup
	$(BIN)/scabbard demo

# two pytest processes: much of the suite waits on JVMs, kernels starting and paced input;
# a module stays on one process (its fixtures are started once)
test: setup peers browser
	$(BIN)/python -m pytest -n 2 --dist loadfile

# the tests marked `long` (minutes each, left out of `make test`): every notebook run by
# `scabbard reproduce --scale tiny`, the Spark standalone cluster, JupyterLab in Chromium
test-long: setup peers browser
	$(BIN)/python -m pytest -n 2 --dist loadfile --long -m long

# the default run keeps one cell per feature of each kill or crash matrix; this runs them all
campaign: setup peers browser
	$(BIN)/python -m pytest -n 2 --dist loadfile --campaign --long

bench: setup peers
	$(BIN)/scabbard bench datagen
	$(BIN)/scabbard bench engine
	$(BIN)/scabbard bench ingest
	$(BIN)/scabbard bench checkpoints
	$(BIN)/scabbard bench codecs
	$(BIN)/scabbard bench synclog
	$(BIN)/scabbard bench peers
	$(BIN)/scabbard bench aligned
	$(BIN)/scabbard bench cluster
	$(MAKE) sim

# the simulator: costs measured here (all eleven queries), then predicted vs measured
sim: setup
	$(BIN)/scabbard datagen all --scale small
	$(BIN)/scabbard sim calibrate --scale small
	$(BIN)/scabbard sim validate --output experiments/runs/sim_validation.csv
	$(BIN)/scabbard sim speed

lint: setup
	$(BIN)/ruff check scabbard tests

java:
	@if [ "$$(id -u)" -eq 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update && $$SUDO apt-get install -y --no-install-recommends openjdk-17-jre-headless

clean-data:
	rm -rf data/cm data/sg data/lrb data/ysb data/nexmark data/sm
