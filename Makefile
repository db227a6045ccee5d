# Quick start (README): `make demo` and `make test`. Both install missing Debian packages first.
PRESET ?= release
BUILD_DIR := build/$(PRESET)
JOBS ?= $(shell nproc)
LPEMU := $(BUILD_DIR)/lpemu
# `make demo` needs only what builds and runs the `lpemu` command; `make test` adds the test,
# benchmark and Python dependencies (PyTorch among them), headless Chromium (loads report.html),
# rsvg-convert (renders the figures), matplotlib (redraws them from results.h5), clang with
# libFuzzer (the fuzz targets' smoke runs), and the aarch64 cross compiler with user-mode QEMU
# (the aarch64 build and its tests).
DEMO_PACKAGES := cmake make g++ libeigen3-dev libboost-dev libtbb-dev libhwy-dev libhdf5-dev libtomlplusplus-dev \
                 libcli11-dev nlohmann-json3-dev libpcre2-dev pkg-config
PACKAGES := $(DEMO_PACKAGES) catch2 libbenchmark-dev pybind11-dev python3-dev python3-numpy python3-h5py \
            python3-torch python3-pytest python3-matplotlib chromium librsvg2-bin clang-14 libfuzzer-14-dev \
            g++-aarch64-linux-gnu qemu-user
BENCH := $(if $(filter asan,$(PRESET)),OFF,ON)

FUZZ_TARGETS := $(addprefix lpemu_fuzz_,npy format_toml block_toml datapath_toml plan_toml experiment_toml manifest model_h5 dot_cases)

.PHONY: deps deps-demo configure configure-demo build build-demo test test-asan test-fuzz test-aarch64 demo bench clean

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

configure: deps
	cmake --preset $(PRESET) -DLPEMU_BUILD_TESTS=ON -DLPEMU_BUILD_BENCH=$(BENCH) -DLPEMU_BUILD_PYTHON=ON

configure-demo: deps-demo
	cmake --preset $(PRESET) -DLPEMU_BUILD_TESTS=OFF -DLPEMU_BUILD_BENCH=OFF -DLPEMU_BUILD_PYTHON=OFF

build: configure
	cmake --build --preset $(PRESET) -j $(JOBS)

build-demo: configure-demo
	cmake --build --preset $(PRESET) -j $(JOBS) --target lpemu_cli

test: build
	ctest --preset $(PRESET) -j $(JOBS)
	$(MAKE) test-asan
	$(MAKE) test-fuzz
	$(MAKE) test-aarch64

# ASan + UBSan + float-cast-overflow build of the unit, CLI and fuzz-corpus tests (README "Robustness").
test-asan: deps
	cmake --preset asan -DLPEMU_BUILD_TESTS=ON -DLPEMU_BUILD_BENCH=OFF -DLPEMU_BUILD_PYTHON=OFF
	cmake --build --preset asan -j $(JOBS) --target lpemu_cli lpemu_unit_tests lpemu_cli_tests $(FUZZ_TARGETS)
	ctest --preset asan -j $(JOBS) -L 'unit|cli|fuzz'

# clang + libFuzzer build of the fuzz targets: replays of their seeds and findings, then a short
# fuzzing run per target (README "Robustness").
test-fuzz: deps
	cmake --preset fuzz -DLPEMU_BUILD_BENCH=OFF -DLPEMU_BUILD_PYTHON=OFF
	cmake --build --preset fuzz -j $(JOBS) --target $(FUZZ_TARGETS)
	ctest --preset fuzz -j $(JOBS)

# Cross build for 64-bit Arm: Debian's aarch64-linux-gnu-g++ against an arm64 sysroot of the
# dependencies (cmake/aarch64/sysroot.sh downloads Debian's arm64 packages into build/ without
# installing them); the unit, golden, property and exhaustive tests run under qemu-aarch64, every
# Highway kernel under each Arm target QEMU emulates (README "Building for other machines").
test-aarch64: deps
	bash cmake/aarch64/sysroot.sh build/aarch64-sysroot
	cmake --preset aarch64
	cmake --build --preset aarch64 -j $(JOBS) --target lpemu_cli lpemu_unit_tests lpemu_golden_tests \
	  lpemu_property_tests lpemu_exhaustive_tests
	ctest --preset aarch64 -j $(JOBS)

demo: build-demo
	$(LPEMU) sweep experiments/default.toml --out out/default

bench: build
	@for b in $(BUILD_DIR)/bench/lpemu_bench_*; do echo "== $$b"; $$b; done

clean:
	rm -rf build
