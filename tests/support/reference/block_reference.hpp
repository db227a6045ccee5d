// Independent exact reference for block quantisation (tests only). It shares no code or tables
// with src/: element grids come from the spec field formulas written out here, values are exact
// rationals (Boost.Multiprecision cpp_rational), exponents come from exact comparisons with
// powers of two.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lpemu::test::ref {

/// An element or scale grid written from its spec: floating (p significant bits incl. the
/// implicit one, smallest normal exponent emin, largest finite value max, subnormals) or fixed
/// point (every multiple of 2^quantum_exp up to max).
struct Grid {
  bool fixed = false;
  int p = 0;
  int emin = 0;
  double max = 0;
  bool subnormals = true;
  int quantum_exp = 0;
};

/// The grids of the OCP formats, from OFP8 Rev 1.0 / OCP MX v1.0 field definitions.
Grid fp8_e4m3();  ///< bias 7, max 448, subnormals
Grid fp8_e5m2();  ///< bias 15, max 57344
Grid fp6_e2m3();  ///< bias 1, max 7.5
Grid fp6_e3m2();  ///< bias 3, max 28
Grid fp4_e2m1();  ///< bias 1, max 6
Grid mxint8();    ///< multiples of 2^-6 up to 127/64
Grid int8();      ///< integers up to 127
Grid fp32();      ///< binary32

/// Rounding modes of the reference (spelled like lpemu's, but a separate type).
enum class Mode { nearest_even, nearest_away, toward_zero, toward_positive, toward_negative };

/// x rounded to the grid under `mode`, saturating at ±max; exact. x finite. Returns a double
/// (every grid value is a double). −0 for negative x that rounds to zero.
double round_to_grid(double x, const Grid& g, Mode mode);
/// x / 2^s rounded to the grid, times 2^s: exact rational arithmetic.
double round_scaled_pow2(double x, int s, const Grid& g, Mode mode);
/// x / S rounded to the grid, times S, for any positive S given as S1·S2 (exact rationals).
double round_scaled(double x, double s1, double s2, const Grid& g, Mode mode);
/// The e with 2^e ≤ a < 2^(e+1), a > 0 finite, by exact comparisons.
int floor_log2(double a);
/// The largest power-of-two exponent e with 2^e ≤ g.max.
int grid_emax(const Grid& g);

/// Result of the reference MX quantisation of one block.
struct MxBlock {
  bool nan = false;         ///< NaN block (NaN/Inf input or scale overflow)
  int shared_exp = 0;       ///< the E8M0 exponent
  std::vector<double> out;  ///< dequantised values
};

/// OCP MX v1.0 block rule with an E8M0 scale (range 2^-127..2^127): shared exponent
/// floor(log2 amax) − emax_elem (rule "ocp"), the smallest s with amax ≤ max·2^s ("ceil"),
/// or the OCP rule on amax rounded ties-away to the element precision ("even").
MxBlock mx_block(const std::vector<float>& x, const Grid& elem, const std::string& rule, Mode mode);

/// NVFP4 reference for a whole tensor quantised in blocks of 16 along the last axis of a
/// contiguous vector: g = fp32(amax/(6·448)), S_b = e4m3(amax_b/(6g)) RNE saturating,
/// elements e2m1(x/(S_b·g)) RNE saturating, value = q·S_b·g rounded to float.
std::vector<double> nvfp4(const std::vector<float>& x);

}  // namespace lpemu::test::ref
