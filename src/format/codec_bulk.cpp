// Bulk conversions. float32 input into, and codes of, a floating format that fits in float32 take
// the Highway kernels (format/codec_simd.cpp) under every rounding mode; every other case takes
// the scalar generic path. Work is cut into fixed chunks run by oneTBB; each
// element depends only on its value and index, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "format/codec_detail.hpp"
#include "format/codec_simd.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::format {
namespace {

using detail::Fast;
using detail::fast_eligible;
using detail::make_fast;

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

template <class Code>
void encode_generic(const Format& f, std::span<const float> in, std::span<Code> out,
                    const ConvertOptions& o) {
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      out[i] = static_cast<Code>(
          detail::convert(f, in[i], o, o.index_offset + i, std::numeric_limits<float>::min()).code);
    }
  });
}

// float32 -> codes in storage Code: the Highway kernel for fast-kernel formats, else the generic
// path.
template <class Code>
void encode_fast_or_generic(const Format& f, std::span<const float> in, std::span<Code> out,
                            const ConvertOptions& o) {
  validate(o);
  check_sizes(in.size(), out.size(), "encode");
  check_code_width(f, static_cast<int>(sizeof(Code) * 8), "encode");
  if (!fast_eligible(f)) {
    encode_generic(f, in, out, o);
    return;
  }
  const Fast p = make_fast(f, o);
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    detail::simd_encode(p, o.rounding, in.data() + lo, out.data() + lo, hi - lo, o.index_offset + lo);
  });
}

template <class Code>
void decode_via_table(const Format& f, std::span<const Code> in, std::span<float> out) {
  check_sizes(in.size(), out.size(), "decode");
  if (fast_eligible(f)) {
    // The Highway kernel (format/codec_simd.cpp): arithmetic on whole vectors. A 256-entry table
    // is no faster: compilers turn its lookups into gathers, slow on AVX-512 machines.
    const Fast p = make_fast(f, ConvertOptions{});
    const auto mask = static_cast<std::uint32_t>(f.code_mask());
    for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
      detail::simd_decode(p, mask, in.data() + lo, out.data() + lo, hi - lo);
    });
    return;
  }
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

namespace detail {

bool fast_eligible(const Format& f) {
  return f.kind == Kind::floating && f.has_zero && f.mantissa_bits <= 22 && fits_in_float(f) && f.bits <= 32;
}

Fast make_fast(const Format& f, const ConvertOptions& o) {
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
  // A finite double beyond max finite (the carrier is double, so this works for emax = 127 too).
  const double big = std::ldexp(1.0, f.emax + 2);
  for (int s = 0; s < 2; ++s) {
    const double sg = s ? -1.0 : 1.0;
    const auto code_of = [&](double x) {
      return static_cast<std::uint32_t>(detail::convert(f, x, o, 0, std::numeric_limits<float>::min()).code);
    };
    p.nan_code[s] = code_of(std::copysign(std::numeric_limits<double>::quiet_NaN(), sg));
    p.inf_code[s] = code_of(sg * std::numeric_limits<double>::infinity());
    // The overflow outcome for this sign and mode.
    p.ovf_code[s] = code_of(sg * big);
  }
  p.neg_code = f.is_signed ? 0 : static_cast<std::uint32_t>(detail::convert(f, -1.0, o, 0, 0.0).code);
  p.sr_bits = static_cast<std::uint32_t>(o.sr_bits);
  p.seed = o.seed;
  // With bias 127 (bf16, tf32) the subnormal codes are float32 subnormals whose bits the normal
  // formula already gives; the product would form a float32 subnormal, a slow denormal assist,
  // on every element, so it is skipped (multiplied by 0, never selected).
  const bool sub_exact_as_normal = f.subnormals && f.bias == 127 && f.emin == -126;
  p.sub_quantum = sub_exact_as_normal ? 0.0F : static_cast<float>(std::ldexp(1.0, f.emin - f.mantissa_bits));
  p.sub_fields = sub_exact_as_normal ? 0U : 1U;
  p.inf_mag = f.has_inf() ? static_cast<std::uint32_t>(f.inf_code()) : ~0U;
  p.nan_above_max = f.specials == Specials::ieee || f.specials == Specials::fn;
  p.nan_sign_bit = f.specials == Specials::fnuz;
  p.nan_keeps_sign = f.specials != Specials::fnuz;
  return p;
}

}  // namespace detail

void quantize(const Format& fmt, std::span<const float> in, std::span<float> out,
              const ConvertOptions& opts) {
  validate(opts);
  check_sizes(in.size(), out.size(), "quantize");
  if (!fast_eligible(fmt)) {
    for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) {
        out[i] = static_cast<float>(
            detail::convert(fmt, in[i], opts, opts.index_offset + i, std::numeric_limits<float>::min())
                .value);
      }
    });
    return;
  }
  const Fast p = make_fast(fmt, opts);
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    detail::simd_quantize(p, opts.rounding, in.data() + lo, out.data() + lo, hi - lo, opts.index_offset + lo);
  });
}

void quantize(const Format& fmt, std::span<const double> in, std::span<double> out,
              const ConvertOptions& opts) {
  validate(opts);
  check_sizes(in.size(), out.size(), "quantize");
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      out[i] =
          detail::convert(fmt, in[i], opts, opts.index_offset + i, std::numeric_limits<double>::min()).value;
    }
  });
}

void encode(const Format& fmt, std::span<const float> in, std::span<std::uint8_t> out,
            const ConvertOptions& opts) {
  encode_fast_or_generic(fmt, in, out, opts);
}

void encode(const Format& fmt, std::span<const float> in, std::span<std::uint16_t> out,
            const ConvertOptions& opts) {
  encode_fast_or_generic(fmt, in, out, opts);
}

void encode(const Format& fmt, std::span<const float> in, std::span<std::uint32_t> out,
            const ConvertOptions& opts) {
  encode_fast_or_generic(fmt, in, out, opts);
}

void encode(const Format& fmt, std::span<const double> in, std::span<std::uint64_t> out,
            const ConvertOptions& opts) {
  validate(opts);
  check_sizes(in.size(), out.size(), "encode");
  for_chunks(in.size(), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      out[i] =
          detail::convert(fmt, in[i], opts, opts.index_offset + i, std::numeric_limits<double>::min()).code;
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
