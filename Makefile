# Quick start (README): `make demo` and `make test`. Both install missing Debian packages first;
# `make check` is the developer loop (no installation).
PRESET ?= release
BUILD_DIR := build/$(PRESET)
JOBS ?= $(shell nproc)
LPEMU := $(BUILD_DIR)/lpemu
# `make demo` needs only what builds and runs the `lpemu` command; `make test` adds the test,
# benchmark and Python dependencies (PyTorch among them), headless Chromium (loads report.html),
# rsvg-convert (renders the figures), matplotlib (redraws them from results.h5), clang with
# libFuzzer (the fuzz targets' smoke runs), and the aarch64 cross compiler with user-mode QEMU
# (the aarch64 build and its tests).
DEMO_PACKAGES := cmake make ninja-build g++ libeigen3-dev libboost-dev libtbb-dev libhwy-dev libhdf5-dev libtomlplusplus-dev \
                 libcli11-dev nlohmann-json3-dev libpcre2-dev pkg-config
PACKAGES := $(DEMO_PACKAGES) catch2 libbenchmark-dev pybind11-dev python3-dev python3-numpy python3-h5py \
            python3-torch python3-pytest python3-matplotlib chromium librsvg2-bin clang-14 libfuzzer-14-dev \
            g++-aarch64-linux-gnu qemu-user
BENCH := $(if $(filter asan,$(PRESET)),OFF,ON)

FUZZ_TARGETS := $(addprefix lpemu_fuzz_,npy format_toml block_toml datapath_toml plan_toml experiment_toml manifest model_h5 dot_cases hf_config safetensors tokenizer_json)

# ccache, where installed, for every build (`make check` after a one-file change, the fresh
# builds of `make test`); CCACHE=... overrides, CCACHE= turns it off.
CCACHE ?= $(shell command -v ccache 2>/dev/null)
LAUNCHER := $(if $(CCACHE),-DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE) -DCMAKE_C_COMPILER_LAUNCHER=$(CCACHE),)
# `make check`'s programs and labels: what a one-file change needs rebuilt and re-run.
CHECK_TARGETS := lpemu_cli lpemu_unit_tests lpemu_golden_tests lpemu_property_tests lpemu_cli_tests lpemu_python
CHECK_LABELS := unit|golden|property|cli|python

.PHONY: deps deps-demo configure configure-demo build build-demo check test test-release test-asan test-fuzz \
        test-sanitize test-aarch64 tidy-record demo bench clean

deps: PKGS = $(PACKAGES)
deps-demo: PKGS = $(DEMO_PACKAGES)
deps deps-demo:
	@missing=""; \
	for p in $(PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "lpemu: installing missing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y --no-install-recommends $$missing; \
	else echo "lpemu: all Debian packages present"; fi

# A build folder that an earlier lpemu configured with Unix Makefiles is reconfigured for Ninja
# (CMake refuses to switch generators in place); its objects are rebuilt (from ccache where present).
GENERATOR_GUARD = for d in build/*/; do [ -f "$$d/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$$' \
  "$$d/CMakeCache.txt" && rm -rf "$$d/CMakeCache.txt" "$$d/CMakeFiles"; done; true

configure: deps
	@$(GENERATOR_GUARD)
	cmake --preset $(PRESET) $(LAUNCHER) -DLPEMU_BUILD_TESTS=ON -DLPEMU_BUILD_BENCH=$(BENCH) -DLPEMU_BUILD_PYTHON=ON

configure-demo: deps-demo
	@$(GENERATOR_GUARD)
	cmake --preset $(PRESET) $(LAUNCHER) -DLPEMU_BUILD_TESTS=OFF -DLPEMU_BUILD_BENCH=OFF -DLPEMU_BUILD_PYTHON=OFF

build: configure
	cmake --build --preset $(PRESET) -j $(JOBS)

build-demo: configure-demo
	cmake --build --preset $(PRESET) -j $(JOBS) --target lpemu_cli

# The developer loop: an incremental release build of what the unit, golden, property, cli and
# python tests need, then those tests. No package installation (`make deps` once), no benchmarks,
# no package, exhaustive or tidy tests; configures build/release only when it is not configured.
check:
	@$(GENERATOR_GUARD)
	@[ -f $(BUILD_DIR)/CMakeCache.txt ] || cmake --preset $(PRESET) $(LAUNCHER) -DLPEMU_BUILD_TESTS=ON \
	  -DLPEMU_BUILD_BENCH=$(BENCH) -DLPEMU_BUILD_PYTHON=ON
	cmake --build --preset $(PRESET) -j $(JOBS) --target $(CHECK_TARGETS)
	ctest --preset $(PRESET) -j $(JOBS) -L '$(CHECK_LABELS)'

# Every stage: the release build and all its tests; one clang build for ASan + UBSan and libFuzzer;
# the aarch64 cross build of the SIMD-target tests under QEMU (docs/building.md: timings).
test: test-release
	$(MAKE) test-sanitize
	$(MAKE) test-aarch64

test-release: build
	ctest --preset $(PRESET) -j $(JOBS)

# One clang-14 build (preset fuzz) with ASan + UBSan + float-cast-overflow and libFuzzer's
# instrumentation: the unit and CLI tests, the fuzz targets' replays of their seeds and findings,
# and a short fuzzing run per target (README "Robustness").
test-sanitize test-fuzz: deps
	@$(GENERATOR_GUARD)
	cmake --preset fuzz $(LAUNCHER) -DLPEMU_BUILD_BENCH=OFF -DLPEMU_BUILD_PYTHON=OFF
	cmake --build --preset fuzz -j $(JOBS) --target lpemu_cli lpemu_unit_tests lpemu_cli_tests $(FUZZ_TARGETS)
	ctest --preset fuzz -j $(JOBS)

# g++'s ASan + UBSan + float-cast-overflow build of the unit, CLI and fuzz-corpus tests (not part
# of `make test`, whose sanitizer stage is clang's, above).
test-asan: deps
	@$(GENERATOR_GUARD)
	cmake --preset asan $(LAUNCHER) -DLPEMU_BUILD_TESTS=ON -DLPEMU_BUILD_BENCH=OFF -DLPEMU_BUILD_PYTHON=OFF
	cmake --build --preset asan -j $(JOBS) --target lpemu_cli lpemu_unit_tests lpemu_cli_tests $(FUZZ_TARGETS)
	ctest --preset asan -j $(JOBS) -L 'unit|cli|fuzz'

# Cross build for 64-bit Arm: Debian's aarch64-linux-gnu-g++ against an arm64 sysroot of the
# dependencies (cmake/aarch64/sysroot.sh downloads Debian's arm64 packages into build/ without
# installing them). What differs on Arm runs under qemu-aarch64: lpemu_target_tests, every Highway
# kernel under each Arm target QEMU emulates, the code that dispatches on the target, and the
# golden vectors of the codecs, block formats and datapaths (README "Building for other machines").
test-aarch64: deps
	@$(GENERATOR_GUARD)
	bash cmake/aarch64/sysroot.sh build/aarch64-sysroot
	cmake --preset aarch64 $(LAUNCHER)
	cmake --build --preset aarch64 -j $(JOBS) --target lpemu_target_tests
	ctest --preset aarch64 -j $(JOBS)

demo: build-demo
	$(LPEMU) sweep experiments/default.toml --out out/default

bench: build
	@for b in $(BUILD_DIR)/bench/lpemu_bench_*; do echo "== $$b"; $$b; done

# Rewrites tests/tidy/clean.txt, the record of library sources clang-tidy found clean, for the
# current sources (clang-tidy runs on those whose input changed; docs/building.md "Code style").
tidy-record:
	@$(GENERATOR_GUARD)
	@[ -f $(BUILD_DIR)/CMakeCache.txt ] || cmake --preset $(PRESET) $(LAUNCHER) -DLPEMU_BUILD_TESTS=ON \
	  -DLPEMU_BUILD_BENCH=$(BENCH) -DLPEMU_BUILD_PYTHON=ON
	cmake --build --preset $(PRESET) --target tidy_record

clean:
	rm -rf build
