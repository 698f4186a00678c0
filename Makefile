# slurm-keda — the two commands: `make demo` and `make test` (Debian, as root).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# the local Slurm lab: a development tool beside the product (lab/, not in the wheel or the image)
LAB := $(BIN)/python -m lab
# Debian packages: gcc and Python's headers build the demand model's compiled best fit (setup.py); debootstrap
# builds the lab's trixie (Slurm 24.11) and sid (Slurm 26.05) chroots; prometheus gives promtool (metric and
# rule checks) and a real server for scrape tests; the host's own Slurm 22.05 + munge run the "host" lab (API
# v0.0.38).
APT_PACKAGES := gcc python3-dev debootstrap ca-certificates prometheus slurmctld slurmd slurmrestd slurm-client munge slurm-wlm-jwt-plugin
DEMO_SLURM ?= 26.05
DEMO_PORT ?= 9341
DEMO_GRPC_PORT ?= 9342
# the demo's scaling targets, the same for `demand` and `serve` (dyn: a NodeSet at zero, its shape given)
DEMO_TARGETS := --target partition=cpu --target partition=gpu \
  --target partition=dyn,nodeset=ns-dyn,nodeFeature=dyn,cpusPerNode=8,memoryPerNode=16000

# pytest keeps the test modules it rewrote (assertion rewriting) as .pyc files beside them: an environment
# that sets PYTHONDONTWRITEBYTECODE made every worker of every run rewrite them all again (~4 s of CPU each)
export PYTHONDONTWRITEBYTECODE :=

.PHONY: demo test test-nightly unit deps apt venv lab lab-down lint typecheck bench clean proto dashboards kustomize

deps: apt venv

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

venv: $(BIN)/slurm-keda

$(BIN)/slurm-keda: pyproject.toml setup.py autoscaler/demand/_bestfit.c autoscaler/demand/_scan.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

lab: deps
	$(LAB) up --slurm 24.11
	$(LAB) up --slurm 26.05

lab-down:
	-$(LAB) down --all

demo: deps
	$(LAB) up --slurm $(DEMO_SLURM) --demo
	@url=$$($(LAB) status --slurm $(DEMO_SLURM) --json | $(BIN)/python -c 'import json,sys; print(json.load(sys.stdin)[0]["url"])'); \
	tok=$$($(LAB) status --slurm $(DEMO_SLURM) --json | $(BIN)/python -c 'import json,sys; print(json.load(sys.stdin)[0]["token_file"])'); \
	echo; echo "== one poll, as a table (slurm-keda snapshot) =="; \
	$(BIN)/slurm-keda snapshot --slurmrestd-url $$url --token-file $$tok; \
	echo; echo "== the nodes each target needs (slurm-keda demand; dyn = a NodeSet at zero, shape from the flags) =="; \
	$(BIN)/slurm-keda demand --slurmrestd-url $$url --token-file $$tok $(DEMO_TARGETS); \
	echo; echo "== slurm-keda serve: open http://127.0.0.1:$(DEMO_PORT)/  (each target in words: /targets, metrics: /metrics, snapshot: /snapshot; KEDA external scaler on 127.0.0.1:$(DEMO_GRPC_PORT)); Ctrl-C stops =="; \
	exec $(BIN)/slurm-keda serve --slurmrestd-url $$url --token-file $$tok --listen-address 127.0.0.1 --listen-port $(DEMO_PORT) --poll-interval 2 --grpc-listen 127.0.0.1:$(DEMO_GRPC_PORT) $(DEMO_TARGETS)

# kustomize for tests/unit/test_deploy.py: Debian trixie's package (bookworm has none), fetched with apt into a
# private list/cache directory (the machine's sources stay as they are), binary only.
KUSTOMIZE := $(BIN)/kustomize
KUSTOMIZE_SUITE ?= trixie
kustomize: $(KUSTOMIZE)

$(KUSTOMIZE): | $(BIN)/slurm-keda
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	mirror=$$($(BIN)/python -c 'from lab.chroot import find_mirror; print(find_mirror())'); \
	mkdir -p $$tmp/lists/partial $$tmp/archives/partial; \
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $$mirror $(KUSTOMIZE_SUITE) main" > $$tmp/sources.list; \
	opts="-o Dir::Etc::SourceList=$$tmp/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$$tmp/lists \
	  -o Dir::Cache=$$tmp -o Dir::Cache::Archives=$$tmp/archives -o APT::Sandbox::User=root"; \
	echo "kustomize: from Debian $(KUSTOMIZE_SUITE) ($$mirror)"; \
	apt-get $$opts update -qq; (cd $$tmp && apt-get $$opts download -qq kustomize); \
	dpkg-deb -x $$tmp/kustomize_*.deb $$tmp/x; install -m 755 $$tmp/x/usr/bin/kustomize $@

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

# everything: lint, types, the unit tests (four workers: most of them wait on sockets and subprocesses, not
# the CPU; the fuzzers at a fifth of their examples) and then the live tests against the labs: three
# workers, each lab's tests one after the other in one of them (they share its jobs and nodes;
# tests/conftest.py groups them by lab), the labs side by side — xdist hands out the groups largest first,
# so the 26.05 lab's (the longest) has a worker of its own and the 24.11 and host labs' share the third. The labs are started as needed and left running
# (`make lab-down` stops them). What is left for test-nightly: the tests marked nightly and the fuzzers'
# full example counts.
TEST_WORKERS ?= 4
LIVE_WORKERS ?= 3
test: deps lint typecheck kustomize
	SLURM_KEDA_REQUIRE_LAB=1 SLURM_KEDA_FUZZ=quick $(BIN)/python -m pytest -rfE -n $(TEST_WORKERS) --durations=10 -m "not nightly" tests/unit $(PYTEST_ARGS)
	SLURM_KEDA_REQUIRE_LAB=1 $(BIN)/python -m pytest -rfE -n $(LIVE_WORKERS) --dist loadgroup --durations=25 -m "not nightly" tests/live $(PYTEST_ARGS)
	@echo "the Slurm labs the live tests started are still running (make lab-down stops them)"

# what make test leaves out: the side-by-side run against SchedMD's pending-jobs trigger (2 minutes), and
# every fuzzer with all its examples (make test runs a fifth of them)
test-nightly: deps kustomize
	SLURM_KEDA_REQUIRE_LAB=1 $(BIN)/python -m pytest -rfE --durations=25 -m nightly tests $(PYTEST_ARGS)
	$(BIN)/python -m pytest -rfE -n $(TEST_WORKERS) --durations=10 tests/unit/test_fuzz.py $(PYTEST_ARGS)

# quick feedback: the unit tests only (no lab), four workers, every property test on a fifth of make test's
# examples and seeds (testkit/budget.py), without the two that burn seconds of CPU (marked heavy: a wheel
# build, thousands of sockets; make test runs them)
unit: venv
	SLURM_KEDA_FUZZ=smoke $(BIN)/python -m pytest -q -n 4 -m "not heavy" tests/unit $(PYTEST_ARGS)

# KEDA's external scaler messages: autoscaler/_proto/externalscaler_pb2.py + .pyi (mypy-protobuf), committed;
# tests/unit/test_grpc_scaler.py regenerates them (PROTO_OUT=<tmp>) and checks they are byte-identical.
proto: PROTO_OUT ?= autoscaler/_proto
proto:
	mkdir -p $(PROTO_OUT)
	$(BIN)/python -m grpc_tools.protoc -Iautoscaler --plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy \
	  --python_out=$(PROTO_OUT) --mypy_out=$(PROTO_OUT) autoscaler/externalscaler.proto

# dashboards/*.json, dashboards/rules/slurm-keda.rules.yaml and deploy/components/monitoring/prometheusrule.yaml
# from dashboards/definitions.py and dashboards/rules.py (tests check the committed files are what this writes)
dashboards: venv
	$(BIN)/slurm-keda dashboards build

bench: venv
	$(BIN)/python benchmarks/bench_decode.py

clean: lab-down
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
	@cache=$${SLURM_KEDA_LAB_CACHE:-/var/cache/slurm-keda/chroots}; if [ -d "$$cache" ]; then \
	  echo "kept: the labs' Slurm chroots in $$cache ($$(du -sh "$$cache" | cut -f1); building them again takes minutes): rm -rf $$cache frees that"; fi
