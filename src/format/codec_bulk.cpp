// Bulk conversions. float32 input into a floating format that fits in float32 takes a branch-free
// integer kernel (auto-vectorised; AVX2 clone chosen at run time, plain x86-64 otherwise); every
// other case takes the scalar generic path. Work is cut into fixed chunks run by oneTBB; each
// element depends only on its value and index, so results do not depend on the thread count.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "format/codec_detail.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::format {
namespace {

constexpr std::size_t kChunk = 1 << 15;

template <class F>
void for_chunks(std::size_t n, F&& body) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 1) {
    if (n > 0) body(std::size_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, chunks, 1),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t c = r.begin(); c != r.end(); ++c) {
                        const std::size_t lo = c * kChunk;
                        body(lo, std::min(n, lo + kChunk));
                      }
                    });
}

void check_sizes(std::size_t in, std::size_t out, const char* what) {
  if (in != out) {
    throw ShapeError(std::string(what) + ": input has " + std::to_string(in) + " elements but output has " +
                     std::to_string(out));
  }
}

void check_code_width(const Format& f, int width, const char* what) {
  if (f.bits > width) {
    throw ShapeError(std::string(what) + ": format '" + f.name + "' has " + std::to_string(f.bits) +
                     "-bit codes, which do not fit " + std::to_string(width) + "-bit code storage");
  }
}

// ---- the fast kernel -------------------------------------------------------------------------

// Per-call constants of the fast kernel: everything that depends on the format and the options.
struct Fast {
  std::int32_t m, emin, bias, sign_shift;
  std::uint32_t max_code, sub_limit;  // sub_limit = 2^m: magnitudes below it are subnormal
  std::uint32_t subnormals, ftz, daz, is_signed, neg_zero;
  std::uint32_t nan_code[2], inf_code[2], ovf_code[2], neg_code;
  std::uint32_t sr_bits;
  std::uint64_t seed, index0;
  float sub_quantum;  // 2^(emin - m): value of subnormal code 1
};

bool fast_eligible(const Format& f) {
  return f.kind == Kind::floating && f.has_zero && f.mantissa_bits <= 22 && fits_in_float(f) && f.bits <= 32;
}

Fast make_fast(const Format& f, const ConvertOptions& o, std::uint64_t index0) {
  Fast p{};
  p.m = f.mantissa_bits;
  p.emin = f.emin;
  p.bias = f.bias;
  p.sign_shift = f.bits - 1;
  p.max_code = static_cast<std::uint32_t>(f.max_code);
  p.sub_limit = 1U << f.mantissa_bits;
  p.subnormals = f.subnormals;
  p.ftz = o.flush_subnormal_outputs;
  p.daz = o.flush_subnormal_inputs;
  p.is_signed = f.is_signed;
  p.neg_zero = f.has_negative_zero();
  // The special outcomes come from the generic path itself, so the two cannot disagree.
  const double big = std::ldexp(1.0, f.emax + 2);  // certainly beyond max finite (a double)
  for (int s = 0; s < 2; ++s) {
    const double sg = s ? -1.0 : 1.0;
    const auto code_of = [&](double x) {
      return static_cast<std::uint32_t>(detail::convert(f, x, o, 0, std::numeric_limits<float>::min()).code);
    };
    p.nan_code[s] = code_of(std::copysign(std::numeric_limits<double>::quiet_NaN(), sg));
    p.inf_code[s] = code_of(sg * std::numeric_limits<double>::infinity());
    // A finite value far beyond max finite: the overflow outcome for this sign and mode.
    p.ovf_code[s] = code_of(sg * big);
  }
  p.neg_code = f.is_signed ? 0 : static_cast<std::uint32_t>(detail::convert(f, -1.0, o, 0, 0.0).code);
  p.sr_bits = static_cast<std::uint32_t>(o.sr_bits);
  p.seed = o.seed;
  p.index0 = index0;
  p.sub_quantum = static_cast<float>(std::ldexp(1.0, f.emin - f.mantissa_bits));
  return p;
}

// Rounds float bits `u` to a code of the format (see detail::convert for the definition).
template <RoundingMode M>
[[gnu::always_inline]] inline std::uint32_t fast_encode_one(const Fast& p, std::uint32_t u, std::uint64_t index) {
  const std::uint32_t s = u >> 31;
  std::uint32_t a = u & 0x7fffffffU;
  if (p.daz) a = a < 0x00800000U ? 0 : a;
  const std::int32_t fe = static_cast<std::int32_t>(a >> 23);
  const std::int32_t fe1 = fe > 1 ? fe : 1;
  const std::uint32_t sig = (a & 0x7fffffU) | (fe != 0 ? 0x800000U : 0U);
  const std::int32_t ex = fe1 - 127;
  const bool tiny = ex < p.emin;
  const std::int32_t qe = tiny ? (p.subnormals ? p.emin - p.m : p.emin) : ex - p.m;
  std::int32_t shift = qe - (fe1 - 150);  // >= 1 because m <= 22
  shift = shift < 31 ? shift : 31;        // beyond 24 every bit is discarded anyway
  const std::uint32_t n = sig >> shift;
  const std::uint32_t rem = sig & ((1U << shift) - 1U);
  const std::uint32_t half = 1U << (shift - 1);
  std::uint32_t up = 0;
  if constexpr (M == RoundingMode::nearest_even) {
    up = static_cast<std::uint32_t>((rem > half) | ((rem == half) & ((n & 1U) != 0)));
  } else if constexpr (M == RoundingMode::nearest_away) {
    up = static_cast<std::uint32_t>(rem >= half);
  } else if constexpr (M == RoundingMode::toward_positive) {
    up = static_cast<std::uint32_t>((rem != 0) & (s == 0));
  } else if constexpr (M == RoundingMode::toward_negative) {
    up = static_cast<std::uint32_t>((rem != 0) & (s != 0));
  } else if constexpr (M == RoundingMode::stochastic) {
    // True shift may exceed 31: recompute the r leading discarded bits exactly in 64 bits.
    const std::int32_t true_shift = qe - (fe1 - 150);
    const std::int32_t r = static_cast<std::int32_t>(p.sr_bits);
    const std::uint64_t rem64 = true_shift >= 32 ? sig : rem;
    std::uint64_t frac_r = 0;
    if (true_shift >= r) {
      frac_r = (true_shift - r) >= 64 ? 0 : rem64 >> (true_shift - r);
    } else {
      frac_r = rem64 << (r - true_shift);
    }
    const std::uint64_t rnd = static_cast<std::uint64_t>(sr_random_bits(p.seed, index)) >> (32 - r);
    up = static_cast<std::uint32_t>(((frac_r + rnd) >> r) != 0);
  }
  const std::uint32_t nr = n + up;
  std::uint32_t mag = (tiny && !p.subnormals)
                          ? (nr << p.m)
                          : (static_cast<std::uint32_t>(qe + p.m + p.bias - 1) << p.m) + nr;
  if (tiny && p.subnormals) mag = nr;
  if (p.ftz) mag = mag < p.sub_limit ? 0 : mag;
  const std::uint32_t zero_code = p.neg_zero ? (s << p.sign_shift) : 0U;
  std::uint32_t code = mag == 0 ? zero_code : (mag | ((s & p.is_signed) << p.sign_shift));
  code = mag > p.max_code ? p.ovf_code[s] : code;
  code = (!p.is_signed && s != 0 && a != 0) ? p.neg_code : code;
  code = a == 0x7f800000U ? p.inf_code[s] : code;
  code = a > 0x7f800000U ? p.nan_code[s] : code;
  return code;
}

// Value of a code of a fast-eligible format as float bits.
[[gnu::always_inline]] inline float fast_decode_one(const Fast& p, std::uint32_t code) {
  const std::uint32_t s = p.is_signed ? (code >> p.sign_shift) & 1U : 0U;
  const std::uint32_t mag = p.is_signed ? code & ((1U << p.sign_shift) - 1U) : code;
  const std::uint32_t field = mag >> p.m;
  const std::uint32_t frac = mag & (p.sub_limit - 1U);
  // Normal: rebuild float bits directly; subnormal: frac · 2^(emin-m), an exact product.
  const std::uint32_t normal_bits =
      (static_cast<std::uint32_t>(static_cast<std::int32_t>(field) - p.bias + 127) << 23) | (frac << (23 - p.m));
  const float sub = p.subnormals ? static_cast<float>(frac) * p.sub_quantum : 0.0F;
  float v = field == 0 ? sub : std::bit_cast<float>(normal_bits);
  v = s != 0 ? -v : v;
  return v;
}

template <RoundingMode M, class Out>
[[gnu::always_inline]] inline void fast_encode_span(const Fast& p, const float* in, Out* out, std::size_t n,
                                                   std::uint64_t index0) {
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<Out>(fast_encode_one<M>(p, std::bit_cast<std::uint32_t>(in[i]), index0 + i));
  }
}

// Values of codes; NaN/Inf outcomes are patched afterwards by the caller (rare, outside the hot loop).
template <RoundingMode M>
[[gnu::always_inline]] inline void fast_quantize_span(const Fast& p, const float* in, float* out,
                                                     std::size_t n, std::uint64_t index0) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t code = fast_encode_one<M>(p, std::bit_cast<std::uint32_t>(in[i]), index0 + i);
    out[i] = fast_decode_one(p, code);
  }
}

#define LPEMU_CLONES __attribute__((target_clones("avx2", "default")))

template <RoundingMode M>
LPEMU_CLONES void encode_u8(const Fast& p, const float* in, std::uint8_t* out, std::size_t n, std::uint64_t i0) {
  fast_encode_span<M>(p, in, out, n, i0);
}
template <RoundingMode M>
LPEMU_CLONES void encode_u16(const Fast& p, const float* in, std::uint16_t* out, std::size_t n, std::uint64_t i0) {
  fast_encode_span<M>(p, in, out, n, i0);
}
template <RoundingMode M>
LPEMU_CLONES void encode_u32(const Fast& p, const float* in, std::uint32_t* out, std::size_t n, std::uint64_t i0) {
  fast_encode_span<M>(p, in, out, n, i0);
}
template <RoundingMode M>
LPEMU_CLONES void quantize_f32(const Fast& p, const float* in, float* out, std::size_t n, std::uint64_t i0) {
  fast_quantize_span<M>(p, in, out, n, i0);
}

#undef LPEMU_CLONES

template <class F>
void dispatch_mode(RoundingMode m, F&& f) {
  switch (m) {
    case RoundingMode::nearest_even: f.template operator()<RoundingMode::nearest_even>(); break;
    case RoundingMode::nearest_away: f.template operator()<RoundingMode::nearest_away>(); break;
    case RoundingMode::toward_zero: f.template operator()<RoundingMode::toward_zero>(); break;
    case RoundingMode::toward_positive: f.template operator()<RoundingMode::toward_positive>(); break;
    case RoundingMode::toward_negative: f.template operator()<RoundingMode::toward_negative>(); break;
    case RoundingMode::stochastic: f.template operator()<RoundingMode::stochastic>(); break;
  }
}

template <class Code>
void encode_generic(const Format& f, std::span<const float> in, std::span<Code> out, const ConvertOptions& o) {
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      out[i] = static_cast<Code>(
          detail::convert(f, in[i], o, o.index_offset + i, std::numeric_limits<float>::min()).code);
    }
  });
}

template <class Code, class Kernel>
void encode_fast_or_generic(const Format& f, std::span<const float> in, std::span<Code> out,
                            const ConvertOptions& o, Kernel kernel_for_mode) {
  validate(o);
  check_sizes(in.size(), out.size(), "encode");
  check_code_width(f, static_cast<int>(sizeof(Code) * 8), "encode");
  if (!fast_eligible(f)) {
    encode_generic(f, in, out, o);
    return;
  }
  const Fast p = make_fast(f, o, o.index_offset);
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    kernel_for_mode(p, in.data() + lo, out.data() + lo, hi - lo, o.index_offset + lo);
  });
}

template <class Code>
void decode_via_table(const Format& f, std::span<const Code> in, std::span<float> out) {
  check_sizes(in.size(), out.size(), "decode");
  if (f.bits <= 16 && in.size() >= (std::size_t{1} << f.bits) / 4) {
    std::vector<float> table(std::size_t{1} << f.bits);
    for (std::size_t c = 0; c < table.size(); ++c) table[c] = static_cast<float>(decode(f, c));
    const std::uint32_t mask = static_cast<std::uint32_t>(f.code_mask());
    for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) out[i] = table[static_cast<std::uint32_t>(in[i]) & mask];
    });
    return;
  }
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) out[i] = static_cast<float>(decode(f, in[i]));
  });
}

}  // namespace

void quantize(const Format& fmt, std::span<const float> in, std::span<float> out, const ConvertOptions& opts) {
  validate(opts);
  check_sizes(in.size(), out.size(), "quantize");
  if (!fast_eligible(fmt)) {
    for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) {
        out[i] = static_cast<float>(
            detail::convert(fmt, in[i], opts, opts.index_offset + i, std::numeric_limits<float>::min()).value);
      }
    });
    return;
  }
  const Fast p = make_fast(fmt, opts, opts.index_offset);
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    dispatch_mode(opts.rounding, [&]<RoundingMode M>() {
      quantize_f32<M>(p, in.data() + lo, out.data() + lo, hi - lo, opts.index_offset + lo);
    });
    // Codes that are NaN or Inf in the format: patch the values (the fast decode is finite-only).
    if (fmt.has_nan() || fmt.has_inf()) {
      for (std::size_t i = lo; i < hi; ++i) {
        const bool may_be_special =
            !std::isfinite(in[i]) || std::fabs(in[i]) > static_cast<float>(fmt.max_finite) ||
            (!fmt.is_signed && std::signbit(in[i]));
        if (may_be_special) {
          out[i] = static_cast<float>(
              detail::convert(fmt, in[i], opts, opts.index_offset + i, std::numeric_limits<float>::min()).value);
        }
      }
    }
  });
}

void quantize(const Format& fmt, std::span<const double> in, std::span<double> out, const ConvertOptions& opts) {
  validate(opts);
  check_sizes(in.size(), out.size(), "quantize");
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      out[i] = detail::convert(fmt, in[i], opts, opts.index_offset + i, std::numeric_limits<double>::min()).value;
    }
  });
}

void encode(const Format& fmt, std::span<const float> in, std::span<std::uint8_t> out, const ConvertOptions& opts) {
  encode_fast_or_generic(fmt, in, out, opts, [&](const Fast& p, const float* i, std::uint8_t* o, std::size_t n,
                                                std::uint64_t i0) {
    dispatch_mode(opts.rounding, [&]<RoundingMode M>() { encode_u8<M>(p, i, o, n, i0); });
  });
}

void encode(const Format& fmt, std::span<const float> in, std::span<std::uint16_t> out,
            const ConvertOptions& opts) {
  encode_fast_or_generic(fmt, in, out, opts, [&](const Fast& p, const float* i, std::uint16_t* o, std::size_t n,
                                                std::uint64_t i0) {
    dispatch_mode(opts.rounding, [&]<RoundingMode M>() { encode_u16<M>(p, i, o, n, i0); });
  });
}

void encode(const Format& fmt, std::span<const float> in, std::span<std::uint32_t> out,
            const ConvertOptions& opts) {
  encode_fast_or_generic(fmt, in, out, opts, [&](const Fast& p, const float* i, std::uint32_t* o, std::size_t n,
                                                std::uint64_t i0) {
    dispatch_mode(opts.rounding, [&]<RoundingMode M>() { encode_u32<M>(p, i, o, n, i0); });
  });
}

void encode(const Format& fmt, std::span<const double> in, std::span<std::uint64_t> out,
            const ConvertOptions& opts) {
  validate(opts);
  check_sizes(in.size(), out.size(), "encode");
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      out[i] = detail::convert(fmt, in[i], opts, opts.index_offset + i, std::numeric_limits<double>::min()).code;
    }
  });
}

void decode(const Format& fmt, std::span<const std::uint8_t> in, std::span<float> out) {
  check_code_width(fmt, 8, "decode");
  decode_via_table(fmt, in, out);
}

void decode(const Format& fmt, std::span<const std::uint16_t> in, std::span<float> out) {
  check_code_width(fmt, 16, "decode");
  decode_via_table(fmt, in, out);
}

void decode(const Format& fmt, std::span<const std::uint32_t> in, std::span<float> out) {
  decode_via_table(fmt, in, out);
}

void decode(const Format& fmt, std::span<const std::uint64_t> in, std::span<double> out) {
  check_sizes(in.size(), out.size(), "decode");
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) out[i] = decode(fmt, in[i]);
  });
}

}  // namespace lpemu::format
