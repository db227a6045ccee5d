#include "lpemu/format/format.hpp"

#include <cmath>
#include <string>

#include "format/enum_names.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::format {
namespace {

[[noreturn]] void bad_field(const Format& f, std::string_view field, const std::string& value,
                            std::string_view expected) {
  throw SpecError("format '" + f.name + "': field '" + std::string(field) + "' = " + value + ": expected " +
                  std::string(expected));
}

// Double-carrier limits: every value of a format must be an exact, normal-or-subnormal double.
constexpr int kDoubleEmax = 1023;
constexpr int kDoubleMinSubnormalExp = -1074;

using detail::kKindNames;
using detail::kSpecialsNames;

}  // namespace

Specials parse_specials(std::string_view text) {
  if (const auto s = lpemu::detail::enum_value(kSpecialsNames, text)) return *s;
  throw SpecError("specials '" + std::string(text) + "': expected one of " +
                  lpemu::detail::join_names(lpemu::detail::enum_spellings(kSpecialsNames)));
}

std::string_view to_string(Specials s) { return lpemu::detail::enum_name(kSpecialsNames, s); }

std::string_view to_string(Kind k) { return lpemu::detail::enum_name(kKindNames, k); }

std::string describe(const Format& f) {
  if (f.kind == Kind::integer) {
    return std::string(f.is_signed ? "signed" : "unsigned") + " integer, " + std::to_string(f.bits) +
           " bits" + (f.fraction_bits != 0 ? ", scale 2^" + std::to_string(-f.fraction_bits) : "") +
           (f.symmetric ? ", symmetric" : "");
  }
  return "E" + std::to_string(f.exponent_bits) + "M" + std::to_string(f.mantissa_bits) + ", bias " +
         std::to_string(f.bias) + ", specials " + std::string(to_string(f.specials)) +
         (f.subnormals ? ", subnormals" : ", no subnormals") + (f.is_signed ? "" : ", unsigned") +
         (f.has_zero ? "" : ", no zero");
}

std::uint64_t Format::nan_code() const {
  switch (specials) {
    // IEEE 754 §3.4: quiet NaN = exponent all ones, leading mantissa bit set.
    case Specials::ieee:
      return (((std::uint64_t{1} << exponent_bits) - 1) << mantissa_bits) |
             (mantissa_bits > 0 ? std::uint64_t{1} << (mantissa_bits - 1) : 0);
    // OCP OFP8 Rev 1.0 E4M3 encoding (S.1111.111), OCP MX v1.0 scale E8M0 (0xFF).
    case Specials::fn: return (std::uint64_t{1} << (exponent_bits + mantissa_bits)) - 1;
    // FNUZ: the negative-zero code is the single NaN.
    case Specials::fnuz: return sign_bit();
    case Specials::none: break;
  }
  return 0;
}

std::uint64_t Format::inf_code() const { return ((std::uint64_t{1} << exponent_bits) - 1) << mantissa_bits; }

void Format::finalize() {
  if (name.empty()) bad_field(*this, "name", "\"\"", "a non-empty name");
  if (kind == Kind::integer) {
    if (bits < kMinIntegerBits || bits > kMaxIntegerBits) {
      bad_field(*this, "bits", std::to_string(bits), "an integer width of 2..32 bits");
    }
    // Every value, max_finite and the step 2^-fraction_bits, must be a finite normal double.
    if (fraction_bits < bits - 1023 || fraction_bits > 1022) {
      bad_field(*this, "fraction_bits", std::to_string(fraction_bits),
                std::to_string(bits - 1023) + "..1022 (a range that is finite in double)");
    }
    if (symmetric && !is_signed) bad_field(*this, "symmetric", "true", "false for unsigned integers");
    const double step = std::ldexp(1.0, -fraction_bits);
    const double top = is_signed ? std::ldexp(1.0, bits - 1) - 1 : std::ldexp(1.0, bits) - 1;
    const double bottom = is_signed ? -(std::ldexp(1.0, bits - 1) - (symmetric ? 1 : 0)) : 0.0;
    max_finite = top * step;
    lowest = bottom * step;
    min_normal = min_subnormal = step;
    exponent_bits = mantissa_bits = bias = 0;
    specials = Specials::none;
    subnormals = false;
    emin = emax = -fraction_bits;
    max_code = 0;
    return;
  }
  if (exponent_bits < 1 || exponent_bits > kMaxExponentBits) {
    bad_field(*this, "exponent_bits", std::to_string(exponent_bits), "1..11");
  }
  if (mantissa_bits < 0 || mantissa_bits > kMaxMantissaBits) {
    bad_field(*this, "mantissa_bits", std::to_string(mantissa_bits), "0..52");
  }
  bits = (is_signed ? 1 : 0) + exponent_bits + mantissa_bits;
  if (bits < 2)
    bad_field(*this, "exponent_bits", std::to_string(exponent_bits), "a format of at least 2 bits");
  if (specials == Specials::ieee && exponent_bits < 2) {
    bad_field(*this, "exponent_bits", std::to_string(exponent_bits),
              "at least 2 with specials = \"ieee\" (all-ones exponent is reserved)");
  }
  if (specials == Specials::ieee && mantissa_bits == 0) {
    // Exponent all ones with mantissa 0 is Inf; no code would be left for NaN.
    bad_field(*this, "mantissa_bits", "0",
              "at least 1 with specials = \"ieee\" (NaN needs a non-zero mantissa)");
  }
  if (specials == Specials::fnuz && !is_signed) {
    bad_field(*this, "specials", "\"fnuz\"", "a signed format (fnuz NaN is the sign bit alone)");
  }
  if (!has_zero && subnormals) {
    bad_field(*this, "subnormals", "true", "false when zero = false (exponent field 0 is a normal binade)");
  }
  if (!has_zero && specials == Specials::fnuz) {
    bad_field(*this, "zero", "false", "true with specials = \"fnuz\"");
  }
  const std::uint64_t all = (std::uint64_t{1} << (exponent_bits + mantissa_bits)) - 1;
  switch (specials) {
    case Specials::ieee: max_code = ((((std::uint64_t{1} << exponent_bits) - 1)) << mantissa_bits) - 1; break;
    case Specials::fn: max_code = all - 1; break;
    case Specials::fnuz:
    case Specials::none: max_code = all; break;
  }
  // Exponent of the smallest normal: field 1 (field 0 too when there is no zero).
  emin = (has_zero ? 1 : 0) - bias;
  const int top_field = static_cast<int>(max_code >> mantissa_bits);
  emax = top_field - bias;
  if (max_code < (has_zero ? (std::uint64_t{1} << mantissa_bits) : 0)) {
    bad_field(*this, "exponent_bits", std::to_string(exponent_bits), "room for at least one normal binade");
  }
  if (emax > kDoubleEmax || emin - mantissa_bits < kDoubleMinSubnormalExp) {
    bad_field(*this, "bias", std::to_string(bias),
              "a range inside double's (emax <= 1023 and emin - mantissa_bits >= -1074); emax would be " +
                  std::to_string(emax) + ", emin " + std::to_string(emin));
  }
  const std::uint64_t top_frac = max_code & ((std::uint64_t{1} << mantissa_bits) - 1);
  max_finite =
      std::ldexp(static_cast<double>((std::uint64_t{1} << mantissa_bits) + top_frac), emax - mantissa_bits);
  min_normal = std::ldexp(1.0, emin);
  min_subnormal = subnormals ? std::ldexp(1.0, emin - mantissa_bits) : min_normal;
  lowest = is_signed ? -max_finite : (has_zero ? 0.0 : min_normal);
  fraction_bits = 0;
  symmetric = false;
}

Format make_float(std::string name, int exponent_bits, int mantissa_bits, int bias, Specials specials,
                  bool subnormals, bool is_signed) {
  Format f;
  f.name = std::move(name);
  f.kind = Kind::floating;
  f.exponent_bits = exponent_bits;
  f.mantissa_bits = mantissa_bits;
  f.bias = bias;
  f.specials = specials;
  f.subnormals = subnormals;
  f.is_signed = is_signed;
  f.finalize();
  return f;
}

Format make_int(std::string name, int bits, bool is_signed, int fraction_bits, bool symmetric) {
  Format f;
  f.name = std::move(name);
  f.kind = Kind::integer;
  f.bits = bits;
  f.is_signed = is_signed;
  f.fraction_bits = fraction_bits;
  f.symmetric = symmetric;
  f.finalize();
  return f;
}

}  // namespace lpemu::format
