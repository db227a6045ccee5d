// Test-only helpers shared by every test kind.
#pragma once

#include <bit>
#include <cstdint>
#include <string>

namespace lpemu::test {

/// Path of a file in the source tree (tests must not depend on the working directory).
std::string source_path(const std::string& relative);
/// Shell command (quoted) that runs the built `lpemu`; in a cross build, under its emulator.
std::string lpemu_binary();
/// Float bits as hex, for failure messages.
std::string hex32(float x);
/// Double bits as hex, for failure messages.
std::string hex64(double x);
/// True if a and b have identical bits, or are both NaN of the same sign.
bool same_bits_or_nan(double a, double b);

}  // namespace lpemu::test
