// Element formats as run-time records.
//
// Specs implemented by the built-in records (see formats/element/*.toml for each file's source):
//   OCP 8-bit Floating Point Specification (OFP8) Rev 1.0 (2023): E4M3, E5M2.
//   OCP Microscaling Formats (MX) v1.0 (2023): FP6 E2M3/E3M2, FP4 E2M1, INT8 elements; E8M0 scale.
//   IEEE 754-2019 §3.6: binary16, binary32; bfloat16 and TF32 as their vendors define them.
//   FNUZ variants as in ml_dtypes v0.6.0 (github.com/jax-ml/ml_dtypes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lpemu::format {

/// Whether a format is a floating-point (sign, exponent, mantissa) or a fixed-point integer format.
enum class Kind : std::uint8_t { floating, integer };

/// Which codes are special in a floating-point format.
///  ieee: exponent all ones is Inf (mantissa 0) or NaN; fn: finite, NaN = S.1..1.1..1 only;
///  fnuz: finite, NaN = sign bit alone (the "negative zero" code), no -0; none: every code finite.
enum class Specials : std::uint8_t { ieee, fn, fnuz, none };

/// Upper and lower limits of user formats.
inline constexpr int kMaxExponentBits = 11;
inline constexpr int kMaxMantissaBits = 52;
inline constexpr int kMinIntegerBits = 2;
inline constexpr int kMaxIntegerBits = 32;

/// A number format: a structural record of facts. Derived limits are computed by `finalize()`.
struct Format {
  std::string name;
  std::vector<std::string> aliases;
  std::string source;  ///< the spec or library the format follows
  Kind kind = Kind::floating;
  bool is_signed = true;

  // Floating point.
  int exponent_bits = 0;
  int mantissa_bits = 0;
  int bias = 0;
  Specials specials = Specials::ieee;
  bool subnormals = true;
  bool has_zero = true;  ///< false: exponent field 0 is a normal binade (E8M0)

  // Integer: `bits` wide two's complement (or unsigned), value = code · 2^-fraction_bits.
  int fraction_bits = 0;
  bool symmetric = false;  ///< signed integers: exclude the most negative code (MX INT8 style)

  // ---- derived by finalize() ----
  int bits = 0;                ///< total width of a code
  int emin = 0;                ///< exponent of the smallest normal (floating)
  int emax = 0;                ///< exponent of the largest finite (floating)
  std::uint64_t max_code = 0;  ///< magnitude code of the largest finite value (floating)
  double max_finite = 0;       ///< largest finite value
  double min_normal = 0;       ///< smallest positive normal value (integer: one step)
  double min_subnormal = 0;    ///< smallest positive value (== min_normal without subnormals)
  double lowest = 0;           ///< most negative finite value (0 or min for unsigned)

  /// True when the format has a NaN encoding.
  bool has_nan() const { return kind == Kind::floating && specials != Specials::none; }
  /// True when the format has ±Inf encodings.
  bool has_inf() const { return kind == Kind::floating && specials == Specials::ieee; }
  /// True when -0 has its own code.
  bool has_negative_zero() const {
    return kind == Kind::floating && is_signed && has_zero && specials != Specials::fnuz;
  }
  /// Number of significand bits including the implicit bit (floating) or value bits (integer).
  int precision() const { return kind == Kind::floating ? mantissa_bits + 1 : bits - (is_signed ? 1 : 0); }
  /// Mask of valid code bits.
  std::uint64_t code_mask() const { return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1; }
  /// The sign bit of a code (0 for unsigned formats).
  std::uint64_t sign_bit() const { return is_signed ? std::uint64_t{1} << (bits - 1) : 0; }
  /// The canonical NaN code (positive sign where there is one); only if has_nan().
  std::uint64_t nan_code() const;
  /// The +Inf code; only if has_inf().
  std::uint64_t inf_code() const;

  /// Validates the fields and fills in the derived ones; throws SpecError naming the field.
  void finalize();

  /// Every field equal (the derived ones follow from the others once finalized).
  friend bool operator==(const Format&, const Format&) = default;
};

/// Parses a Specials name ("ieee", "fn", "fnuz", "none"); throws SpecError otherwise.
Specials parse_specials(std::string_view text);
/// The TOML/CLI spelling of a Specials value.
std::string_view to_string(Specials s);
/// The TOML/CLI spelling of a Kind value ("float" or "int").
std::string_view to_string(Kind k);
/// One-line encoding summary as `lpemu formats list` prints it, e.g.
/// "E4M3, bias 7, specials fn, subnormals" or "signed integer, 8 bits".
std::string describe(const Format& f);

/// Builds and validates a floating-point format from its fields (throws SpecError).
Format make_float(std::string name, int exponent_bits, int mantissa_bits, int bias, Specials specials,
                  bool subnormals = true, bool is_signed = true);
/// Builds and validates an integer format (throws SpecError).
Format make_int(std::string name, int bits, bool is_signed = true, int fraction_bits = 0,
                bool symmetric = false);

}  // namespace lpemu::format
