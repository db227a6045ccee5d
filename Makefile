# Quick start (README): `make demo` and `make test`. Both install missing Debian packages first.
PRESET ?= release
BUILD_DIR := build/$(PRESET)
JOBS ?= $(shell nproc)
LPEMU := $(BUILD_DIR)/lpemu
PACKAGES := cmake make g++ libeigen3-dev libboost-dev libtbb-dev catch2 libhdf5-dev \
            libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libbenchmark-dev python3-torch python3-h5py python3-numpy

FUZZ_TARGETS := $(addprefix lpemu_fuzz_,npy format_toml block_toml datapath_toml plan_toml experiment_toml manifest model_h5)

.PHONY: deps configure build test test-asan demo bench clean

deps:
	@missing=""; \
	for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "lpemu: installing missing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y --no-install-recommends $$missing; \
	else echo "lpemu: all Debian packages present"; fi

configure: deps
	cmake --preset $(PRESET)

build: configure
	cmake --build --preset $(PRESET) -j $(JOBS)

test: build
	ctest --preset $(PRESET) -j $(JOBS)
	$(MAKE) test-asan

# ASan + UBSan + float-cast-overflow build of the unit, CLI and fuzz-corpus tests (README "Robustness").
test-asan: deps
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS) --target lpemu_cli lpemu_unit_tests lpemu_cli_tests $(FUZZ_TARGETS)
	ctest --preset asan -j $(JOBS) -L 'unit|cli|fuzz'

demo: build
	$(LPEMU) sweep experiments/default.toml --out out/default

bench: build
	@for b in $(BUILD_DIR)/bench/lpemu_bench_*; do echo "== $$b"; $$b; done

clean:
	rm -rf build
