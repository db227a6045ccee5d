#include "support/reference/conformance.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::test::ref {

void Failures::add(std::string what) {
  if (count_.fetch_add(1) < 12) {
    const std::lock_guard<std::mutex> lock(mutex_);
    first_.push_back(std::move(what));
  }
}

std::vector<std::string> Failures::first() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return first_;
}

Options reference_options(const format::ConvertOptions& opts, std::uint64_t index) {
  Options o;
  o.rounding = opts.rounding;
  o.overflow = opts.overflow;
  o.sr_bits = opts.sr_bits;
  o.random = opts.rounding == format::RoundingMode::stochastic ? random_bits(opts.seed, index) : 0;
  o.ftz = opts.flush_subnormal_outputs;
  o.daz = opts.flush_subnormal_inputs;
  return o;
}

namespace {

// Adds the fielded binary of the expected and actual codes.
std::string with_fields(const format::Format& f, std::string text, std::uint64_t expected,
                        std::uint64_t actual, bool actual_is_code) {
  text += " [expected " + format::fielded_binary(f, expected);
  if (actual_is_code) text += ", got " + format::fielded_binary(f, actual);
  return text + "]";
}

// The reference value of a code as the float a float-output path must produce.
bool same_float(const Table& t, const format::Format& f, std::uint64_t code, float got) {
  const double v = t.value(code);
  if (std::isnan(v)) {
    // fnuz has a single, unsigned NaN; elsewhere the NaN keeps the code's sign.
    return std::isnan(got) && (f.specials == format::Specials::fnuz || std::signbit(got) == std::signbit(v));
  }
  return std::bit_cast<std::uint32_t>(static_cast<float>(v)) == std::bit_cast<std::uint32_t>(got);
}

template <class Code>
void check_typed(const format::Format& f, const Table& t, std::span<const float> in,
                 const format::ConvertOptions& opts, Failures& failures, Paths paths) {
  // Per-thread buffers, reused across batches: a fresh 128 KiB vector per batch costs more in
  // page faults and zero fill than the conversions under test.
  thread_local std::vector<Code> codes;
  thread_local std::vector<float> values;
  codes.resize(in.size());
  values.resize(in.size());
  if (paths.bulk_encode) format::encode(f, in, std::span<Code>(codes), opts);
  if (paths.bulk_quantize) format::quantize(f, in, std::span<float>(values), opts);
  std::size_t hint = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint64_t index = opts.index_offset + i;
    const Options o = reference_options(opts, index);
    const std::uint64_t expected = t.round(static_cast<double>(in[i]), o, hint);
    if (paths.bulk_encode && codes[i] != expected) {
      failures.add(
          with_fields(f, describe(f, o, in[i], expected, codes[i], "bulk encode"), expected, codes[i], true));
    }
    if (paths.scalar_encode && i % paths.scalar_stride == 0) {
      const std::uint64_t got = format::encode(f, in[i], opts, index);
      if (got != expected) {
        failures.add(
            with_fields(f, describe(f, o, in[i], expected, got, "scalar encode"), expected, got, true));
      }
    }
    if (paths.bulk_quantize && !same_float(t, f, expected, values[i])) {
      failures.add(with_fields(f,
                               describe(f, o, in[i], expected, std::bit_cast<std::uint32_t>(values[i]),
                                        "bulk quantize (got = float bits)"),
                               expected, 0, false));
    }
  }
  failures.checked.fetch_add(in.size());
}

}  // namespace

void check_batch(const format::Format& f, const Table& t, std::span<const float> in,
                 const format::ConvertOptions& opts, Failures& failures, Paths paths) {
  if (f.bits <= 8) {
    check_typed<std::uint8_t>(f, t, in, opts, failures, paths);
  } else {
    check_typed<std::uint16_t>(f, t, in, opts, failures, paths);
  }
}

std::pair<int, int> interesting_window(const Table& t, const format::Format& f) {
  const int emax = std::ilogb(t.max_finite());
  int emin = std::ilogb(t.min_normal());
  int p = 0;
  if (f.kind == format::Kind::floating) {
    p = f.mantissa_bits + 1;
  } else {
    p = f.bits - (f.is_signed ? 1 : 0);
    emin = std::ilogb(t.min_positive());
  }
  return {std::max(emin - p - 2, -127), std::min(emax + 2, 127)};
}

std::vector<float> boundary_set(const Table& t, const format::Format& f) {
  std::vector<double> anchors = t.values();
  const auto mids = t.midpoints();
  anchors.insert(anchors.end(), mids.begin(), mids.end());
  const auto [lo, hi] = interesting_window(t, f);
  for (int e = lo; e <= hi + 1; ++e) anchors.push_back(std::ldexp(1.0, std::max(e, -126)));
  anchors.push_back(static_cast<double>(std::numeric_limits<float>::min()));
  anchors.push_back(static_cast<double>(std::numeric_limits<float>::denorm_min()));
  anchors.push_back(static_cast<double>(std::numeric_limits<float>::max()));
  anchors.push_back(2 * t.max_finite());
  anchors.push_back(t.max_finite() + 2 * t.ulp_at_max());
  anchors.push_back(t.min_positive() / 4);
  std::vector<float> out;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (const double a : anchors) {
    for (const double s : {a, -a}) {
      if (std::fabs(s) > static_cast<double>(std::numeric_limits<float>::max())) continue;
      const auto x = static_cast<float>(s);
      out.push_back(x);
      float up = x;
      float down = x;
      for (int k = 0; k < 4; ++k) {
        up = std::nextafter(up, kInf);
        down = std::nextafter(down, -kInf);
        out.push_back(up);
        out.push_back(down);
      }
    }
  }
  for (const float s : {0.0F, -0.0F, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
                        -std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7f800001U),
                        std::bit_cast<float>(0xffa00000U), std::numeric_limits<float>::max(),
                        -std::numeric_limits<float>::max(), std::bit_cast<float>(0x00000001U),
                        std::bit_cast<float>(0x807fffffU)}) {
    out.push_back(s);
  }
  // One representative per float32 binade outside the window.
  for (std::uint32_t fe = 0; fe < 255; ++fe) {
    out.push_back(std::bit_cast<float>((fe << 23) | 0x2aaaabU));
    out.push_back(std::bit_cast<float>(0x80000000U | (fe << 23) | 0x400000U));
  }
  std::sort(out.begin(), out.end(), [](float a, float b) {
    return std::bit_cast<std::uint32_t>(a) < std::bit_cast<std::uint32_t>(b);
  });
  out.erase(std::unique(out.begin(), out.end(),
                        [](float a, float b) {
                          return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
                        }),
            out.end());
  return out;
}

std::vector<float> strided_window(std::pair<int, int> window, std::uint32_t stride) {
  const std::uint32_t lo_fe = static_cast<std::uint32_t>(window.first + 127);
  const std::uint32_t hi_fe = static_cast<std::uint32_t>(window.second + 127);
  const std::uint32_t lo = lo_fe << 23;
  const std::uint32_t hi = ((hi_fe + 1) << 23) - 1;
  std::vector<float> out;
  for (std::uint64_t u = lo; u <= hi; u += stride) {
    out.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
    out.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(u) | 0x80000000U));
  }
  return out;
}

}  // namespace lpemu::test::ref
