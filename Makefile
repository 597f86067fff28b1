# kiln: the two-command quick start is `make serve` and `make test`.
# Every target installs what is missing first (Debian 12, apt, by name).

SHELL := /bin/bash
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
# Never let a pyenv or other PATH python into the build or the sandbox.
PYTHON := /usr/bin/python3

# Exactly what the build, the tests and the sandbox's Python need.
BUILD_PKGS := cmake g++ make pkg-config libseccomp-dev nlohmann-json3-dev libboost-dev \
  libspdlog-dev libfmt-dev libcli11-dev libtomlplusplus-dev libssl-dev libsqlite3-dev \
  libgtest-dev libgmock-dev prometheus-cpp-dev libre2-dev libpq-dev
PYTHON_PKGS := python3 python3-numpy python3-pandas python3-matplotlib python3-scipy \
  python3-sklearn python3-sympy python3-pil python3-openpyxl python3-requests fonts-dejavu-core
TEST_PKGS := bubblewrap procps curl wrk clang-format-16 postgresql haproxy openssl python3-yaml
# The gVisor backend (backend = "gvisor", docs/adr/0021) and its test tiers.
GVISOR_PKGS := runsc
# The web pages (web/README.md) are bundled with npm and esbuild at build time
# (without them the build goes on, and `kiln serve` says why at /); their tests
# drive Debian's headless Chromium (tests/web). Debian's nodejs and npm only
# where no node is installed (another node's npm would conflict).
WEB_PKGS := chromium $(if $(shell command -v npm 2>/dev/null),,nodejs npm)
DEPS := $(BUILD_PKGS) $(PYTHON_PKGS) $(TEST_PKGS) $(GVISOR_PKGS) $(WEB_PKGS)

# Fuzzing (fuzz/README.md): Debian's clang and libFuzzer, in a build of their own.
FUZZ_PKGS := clang-16 libfuzzer-16-dev libclang-rt-16-dev
FUZZ_DIR := build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= json_depth frame cell_outputs setup_record pool_handoff job_request job_result http_request \
  workspace_path mcp_engine config

.PHONY: all deps build test test-unit test-integration test-escape serve doctor bench bench-pool bench-sessions seccomp-measure asan fuzz clean

all: build

deps:
	@missing=$$(for p in $(DEPS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; done); \
	if [ -z "$$missing" ]; then echo "deps: all present"; exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "deps: missing packages; run as root:"; \
	  echo "  apt-get update && apt-get install -y --no-install-recommends $$missing"; exit 1; \
	fi; \
	echo "deps: installing $$missing"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing

build: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DKILN_PYTHON=$(PYTHON) -DKILN_TIER_TESTS=ON >/dev/null
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

test-unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L unit -j $(JOBS)
test-integration: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L integration -j $(JOBS)
test-escape: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L escape -j $(JOBS)

# The HTTP API on 127.0.0.1:8080 with the built-in config and an SQLite
# database under ./var; the first start creates an API key and prints it.
serve: build
	mkdir -p var
	./$(BUILD_DIR)/kiln serve --data-dir ./var

bench: build
	$(PYTHON) bench/run_bench.py --kiln ./$(BUILD_DIR)/kiln
	$(PYTHON) bench/http_bench.py --kiln ./$(BUILD_DIR)/kiln
	$(PYTHON) bench/pool_bench.py --kiln ./$(BUILD_DIR)/kiln
	$(PYTHON) bench/session_bench.py --kiln ./$(BUILD_DIR)/kiln

# Sessions from the pool against cold sessions and bare Python (bench/README.md), as root.
bench-sessions: build
	$(PYTHON) bench/session_bench.py --kiln ./$(BUILD_DIR)/kiln

# The warm pool alone: (a)-(e) of bench/pool_bench.py (bench/README.md), as root.
bench-pool: build
	$(PYTHON) bench/pool_bench.py --kiln ./$(BUILD_DIR)/kiln

# The system calls sandboxed programs make under the seccomp filter (tools/seccomp/), as root:
# strace of `kiln run` over tools/seccomp/workloads/, cold and pooled. Rewrites the measured set
# the unit tests check the allow-list against (docs/adr/0003-seccomp-allowlist.md).
SECCOMP_MEASURED := src/isolation/testdata/seccomp_measured_$(shell uname -m).txt
seccomp-measure: build
	@$(MAKE) --no-print-directory deps DEPS="strace"
	$(PYTHON) tools/seccomp/measure.py --kiln ./$(BUILD_DIR)/kiln --out $(SECCOMP_MEASURED)

# The whole suite (unit, integration, escape, fuzz replay, clients) on an ASan +
# UBSan build: the server, the spawner, the supervisors and the CLI all run
# instrumented, so a memory error anywhere on the request path fails a test.
asan: deps
	cmake --preset asan-ubsan -DKILN_PYTHON=$(PYTHON) -DKILN_TIER_TESTS=ON >/dev/null
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) --timeout 900

# Each fuzzer for FUZZ_SECONDS (ASan + UBSan), on a working copy of its
# corpus: new inputs go to $(FUZZ_DIR)/corpus/NAME, crashes to
# $(FUZZ_DIR)/artifacts/NAME; fuzz/corpus is only read. `make test` replays
# the committed corpora without clang (ctest -L fuzz).
fuzz: deps
	@$(MAKE) --no-print-directory deps DEPS="$(FUZZ_PKGS)"
	cmake --preset fuzz >/dev/null
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target fuzzers
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$t $(FUZZ_DIR)/artifacts/$$t; \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	  dict=; [ -f fuzz/$$t.dict ] && dict=-dict=fuzz/$$t.dict; \
	  ./$(FUZZ_DIR)/fuzz/$${t}_fuzzer -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $$dict \
	    -artifact_prefix=$(FUZZ_DIR)/artifacts/$$t/ $(FUZZ_DIR)/corpus/$$t fuzz/corpus/$$t \
	    2>$(FUZZ_DIR)/artifacts/$$t.log || failed="$$failed $$t"; \
	  grep -E '^(stat::number_of_executed_units|stat::new_units_added)' $(FUZZ_DIR)/artifacts/$$t.log; \
	done; \
	if [ -n "$$failed" ]; then \
	  echo "fuzz: FAILED:$$failed (logs and inputs in $(FUZZ_DIR)/artifacts)"; exit 1; \
	fi; echo "fuzz: no crash in $(FUZZ_TARGETS)"

clean:
	rm -rf $(BUILD_DIR) build-asan build-debug $(FUZZ_DIR)
