# kraft-py make targets. `make test` and `make demo` install first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SIM_SEEDS ?= 1000
CHAOS_MINUTES ?= 2

.PHONY: install java-runtime browser test test-random demo chaos bench lint sim clean certs fuzz screenshots

install: $(STAMP) java-runtime browser

# Spark needs Java 17+: installed from Debian when missing (as root), else one clear
# line and exit 2, so that the Spark tests are never left out in silence.
java-runtime:
	@sh scripts/ensure-java.sh

# The web console's browser tests need Debian's chromium and chromium-driver:
# installed when missing (as root), else one clear line and exit 2.
browser:
	@sh scripts/ensure-browser.sh

# Re-installs only when pyproject.toml changes: a no-op in seconds once done.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[spark,dev,bench]'
	@touch $(STAMP)

# The suite in two runs. PARALLEL_TESTS (fake clocks, seeded RNGs, and Spark jobs
# that assert no timing) run TEST_WORKERS at a time, each file's tests in order on
# one worker (pytest-xdist --dist loadfile): about half of their wall time was
# waiting. SERIAL_TESTS are the real clusters (floods, chaos, fleets, rotation
# under load, the browser), whose acceptance figures (heartbeat p99, no fence, no
# leader change) must not share the cores with other tests. Every folder of tests/
# is in exactly one list (tests/unit/suite_guards/test_suite_phases.py). Both runs
# always run; either's failure (exit 5, no tests, included) fails `make test`.
PARALLEL_TESTS := tests/unit tests/sim tests/dsim tests/mutants tests/spark
SERIAL_TESTS := tests/integration tests/browser
TEST_WORKERS ?= 2

test: install
	@rc=0; \
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile $(PARALLEL_TESTS) || rc=$$?; \
	$(BIN)/python -m pytest -q -p no:cacheprovider $(SERIAL_TESTS) || rc=$$((rc ? rc : $$?)); \
	exit $$rc

# The browser tests with their screenshots written to docs/img/ (README links them);
# make test writes them to a temporary folder and leaves the checkout as it was.
screenshots: install
	KRAFT_SCREENSHOTS=$(CURDIR)/docs/img $(BIN)/python -m pytest -q -p no:cacheprovider tests/browser

# The whole suite in a random order (pytest-randomly). The seed is printed first, because
# -q hides pytest-randomly's header: RANDOM_SEED=N replays that order.
test-random: install
	@seed=$${RANDOM_SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	echo "random order: make test-random RANDOM_SEED=$$seed replays it"; \
	$(BIN)/python -m pytest -q -p no:cacheprovider -p randomly --randomly-seed=$$seed tests

# The live story on a real local cluster (about a minute), then spark-replay's summary.
# SECURE=1: the same with TLS and authentication on (certificates in the demo's data dir).
demo: install
	$(BIN)/python -m kraft.local.demo $(if $(filter 1 true yes,$(SECURE)),--secure,)

# A local CA, per-node certificates, tokens and ready configs (README "Security").
CERTS_DIR ?= certs
certs: install
	$(BIN)/kraft certs --out $(CERTS_DIR) --controllers 1,2,3 --brokers 4,5,6,7 --admin

# Every endpoint of the API with FUZZ_EXAMPLES hostile requests each (make test: 1,000).
FUZZ_EXAMPLES ?= 10000
fuzz: install
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_RANDOM=1 $(BIN)/python -m pytest -q -p no:cacheprovider -s tests/unit/security/test_fuzz.py

# The chaos test alone for CHAOS_MINUTES minutes with a fresh random seed unless
# CHAOS_SEED=N is given (the seed is printed to replay it). SECURE=1: with TLS, the
# authorizer and credential rotations among the faults. (`make test` runs both, a
# minute each.)
chaos: install
	CHAOS_MINUTES=$(CHAOS_MINUTES) CHAOS_SEED=$${CHAOS_SEED:-random} \
		CHAOS_SECURE=$(if $(filter 1 true yes,$(SECURE)),1,0) \
		$(BIN)/python -m pytest -q -p no:cacheprovider -s tests/integration/test_chaos.py

# Every benchmark in turn, each printing its JSON (full runs take about half an hour;
# QUICK=1 runs each briefly, a smoke test). BENCH=raft_bench runs one.
BENCH ?= http_floor log_bench purgatory_bench raft_bench controller_bench fleet_bench replay_bench security_bench
bench: install
	@set -e; for b in $(BENCH); do \
		q=""; if [ -n "$(QUICK)" ]; then case $$b in \
			replay_bench) q="--records 100000 --repeat 1";; \
			security_bench) q="--seconds 1";; *) q="--quick";; esac; fi; \
		echo "== benchmarks/$$b.py $$q" >&2; \
		$(BIN)/python benchmarks/$$b.py $$q; \
	done

# A Spark standalone cluster on 127.0.0.1 from pyspark's own distribution (no
# download): a master and WORKERS one-core workers; prints the master URL for
# `spark-replay --master URL`. spark-cluster-stop stops exactly those processes.
WORKERS ?= 2
SPARK_CLUSTER_DIR ?= /tmp/kraft-spark-cluster
.PHONY: spark-cluster spark-cluster-stop
spark-cluster: install
	$(BIN)/python -m spark_replay.cluster start --workers $(WORKERS) --state-dir $(SPARK_CLUSTER_DIR)
spark-cluster-stop:
	$(BIN)/python -m spark_replay.cluster stop --state-dir $(SPARK_CLUSTER_DIR)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The deterministic simulators, 2,100 seeds by default: SIM_SEEDS of the Raft core
# (tests/sim, plus 100 of the figure-8 schedule) and DSIM_SEEDS of the deployed code
# (tests/dsim: the real node, Raft driver, controller service, controller and file log
# on a simulated loop, network and disk, driven by scripted broker agents, an admin
# and a fault injector), over min(2, CPUs) processes; SIM_SEED=N replays one seed
# (SIM_TRACE=1 adds the event trace to a failure). make test runs 500 + 100 + 100.
DSIM_SEEDS ?= 1000
sim: install
	SIM_SEEDS=$(SIM_SEEDS) DSIM_SEEDS=$(DSIM_SEEDS) $(BIN)/python -m pytest -q -p no:cacheprovider tests/sim tests/dsim

# Classic bugs planted one at a time (tests/mutants/catalog.py) against the
# simulators, make test's seed budget each: a table of the share of seeds that
# catch each (about 10 minutes on 2 cores). MUTANTS_ARGS="--only figure8 --json".
mutants: install
	$(BIN)/python -m tests.mutants.run $(MUTANTS_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
