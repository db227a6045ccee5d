// The generic block kernel: per block, the scale from the rule, then each element y = x / S in
// double (exact for power-of-two S), rounded by the element format's scalar codec with
// saturation, times S.
#include <cmath>
#include <limits>

#include "block/quantize_detail.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::block::detail {

ElemOut generic_element(const Ctx& c, const Scale& s, float xin, std::uint64_t index, bool want_code) {
  const float x = c.load(xin);
  const format::Format& e = c.f.element;
  if (s.kind == Scale::nan) return {std::numeric_limits<float>::quiet_NaN(), 0};
  double y = 0;
  if (s.kind == Scale::zero) {
    y = std::isnan(x) ? static_cast<double>(x) : std::copysign(0.0, static_cast<double>(x));
  } else {
    y = static_cast<double>(x) / s.value;
  }
  if (c.f.signed_zero == SignedZero::positive && y == 0.0) y = 0.0;  // NOLINT
  double q = format::quantize(e, y, c.eopts, index);
  // Element formats without −0 (integers, fnuz) give +0.
  if ((c.f.signed_zero == SignedZero::positive || !e.has_negative_zero()) && q == 0.0) q = 0.0;  // NOLINT
  std::uint32_t code = 0;
  if (want_code) code = static_cast<std::uint32_t>(format::encode(e, q, format::ConvertOptions{}));
  const double scaled = s.kind == Scale::zero ? q * 0.0 : q * s.value;
  return {narrow(scaled), code};
}

// Generic processing of one block: scale code, and values and/or codes.
void generic_block(const Ctx& c, const float* in, float* out, std::uint32_t* codes, std::uint32_t* scale_code,
                   std::size_t a, std::size_t bi, std::size_t bj) {
  const BlockStats st = block_stats(c, in, a, bi, bj);
  const Scale s = choose_scale(c, in, a, bi, bj, st);
  if (scale_code != nullptr) *scale_code = s.code;
  for_segments(c.L, a, bi, bj, [&](std::size_t lo, std::size_t n) {
    for (std::size_t i = lo; i < lo + n; ++i) {
      const ElemOut r = generic_element(c, s, in[i], i, codes != nullptr);
      if (out != nullptr) out[i] = r.value;
      if (codes != nullptr) codes[i] = r.code;
    }
  });
}

}  // namespace lpemu::block::detail
