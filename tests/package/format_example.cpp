// A consumer of one layer: links lpemu::format alone (no HDF5, no PCRE2 on its link line; the
// package test checks), encodes a few values as FP8 E4M3 and prints their codes and values.
#include <cstdio>

#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

int main() {
  const auto& fmt = lpemu::format::Registry::builtin().get("fp8_e4m3");
  for (const double x : {1.0, 0.3, -448.0, 1e6}) {
    const auto code = lpemu::format::encode(fmt, x);
    std::printf("%s(%g) = 0x%02llx = %g\n", fmt.name.c_str(), x, static_cast<unsigned long long>(code),
                lpemu::format::decode(fmt, code));
  }
}
