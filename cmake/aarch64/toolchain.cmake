# Cross build for 64-bit Arm (aarch64) with Debian's aarch64-linux-gnu-g++ against the sysroot
# that sysroot.sh makes; tests run under qemu-aarch64 (docs/building.md, "Building for other machines").
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
if(NOT LPEMU_AARCH64_SYSROOT)
  set(LPEMU_AARCH64_SYSROOT "${CMAKE_CURRENT_LIST_DIR}/../../build/aarch64-sysroot")
endif()
get_filename_component(LPEMU_AARCH64_SYSROOT "${LPEMU_AARCH64_SYSROOT}" ABSOLUTE)
if(NOT EXISTS "${LPEMU_AARCH64_SYSROOT}/.complete")
  message(FATAL_ERROR "no arm64 sysroot at ${LPEMU_AARCH64_SYSROOT}: run cmake/aarch64/sysroot.sh there "
                      "(make test-aarch64 does)")
endif()
set(CMAKE_SYSROOT "${LPEMU_AARCH64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${LPEMU_AARCH64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config (PCRE2) reads the sysroot's .pc files.
set(ENV{PKG_CONFIG_LIBDIR} "${LPEMU_AARCH64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${LPEMU_AARCH64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${LPEMU_AARCH64_SYSROOT}")
# HDF5: Debian's serial build, found by path (the h5cc wrapper on PATH is the build machine's).
set(HDF5_C_COMPILER_EXECUTABLE "" CACHE FILEPATH "")
set(HDF5_CXX_COMPILER_EXECUTABLE "" CACHE FILEPATH "")
set(HDF5_ROOT "${LPEMU_AARCH64_SYSROOT}/usr/lib/aarch64-linux-gnu/hdf5/serial")
# Tests (and Catch2's test discovery) run the aarch64 programs under user-mode QEMU.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L "${LPEMU_AARCH64_SYSROOT}")
