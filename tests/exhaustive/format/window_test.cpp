// Float32 inputs against the reference, through the bulk fast kernel, the scalar generic path
// and bulk quantize:
//  - every 8th float32 of the interesting window of each <= 8-bit format (nearest_even, native),
//    the skipped low bits rotating from batch to batch: bulk encode and bulk quantize on each,
//    the scalar path on every 32nd float32 (the slow suite checks every float32 of the window in
//    every mode and policy; the boundary-set test below checks every tie and format boundary);
//  - every mode x policy (x sr_bits, FTZ, DAZ) on the boundary set plus a strided interior;
//  - fast path == generic path for bf16 / fp16 / tf32 on random bit patterns.
#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <catch2/catch.hpp>

#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "support/format_cartesian.hpp"
#include "support/reference/conformance.hpp"

namespace {

using namespace lpemu::format;
using lpemu::test::for_each_builtin_format;
using lpemu::test::ref::check_batch;
using lpemu::test::ref::Failures;
using lpemu::test::ref::Table;

constexpr std::size_t kBatch = 1 << 15;
// The window test checks every kStride-th float32 of each batch of kBatch consecutive ones.
constexpr std::uint32_t kStride = 8;

void report(const Failures& failures) {
  for (const auto& line : failures.first()) FAIL_CHECK(line);
  CHECK(failures.count() == 0);
}

// Checks `inputs` in parallel batches.
void check_all(const Format& f, const Table& t, const std::vector<float>& inputs, const ConvertOptions& o,
               Failures& failures) {
  const std::size_t batches = (inputs.size() + kBatch - 1) / kBatch;
  tbb::parallel_for(std::size_t{0}, batches, [&](std::size_t b) {
    const std::size_t lo = b * kBatch;
    const std::size_t n = std::min(kBatch, inputs.size() - lo);
    ConvertOptions ob = o;
    ob.index_offset = o.index_offset + lo;
    check_batch(f, t, std::span<const float>(inputs.data() + lo, n), ob, failures);
  });
}

TEST_CASE(
    "every 8th float32 in the interesting window converts as the reference under nearest_even and "
    "native overflow",
    "[format][exhaustive]") {
  std::uint64_t total = 0;
  for_each_builtin_format([&](const Format& f) {
    if (f.bits > 8 || !f.has_zero) return;  // e8m0's window is all of float32: see the strided test
    const Table t(f);
    const auto window = lpemu::test::ref::interesting_window(t, f);
    const std::uint32_t lo = static_cast<std::uint32_t>(window.first + 127) << 23;
    const std::uint32_t hi = static_cast<std::uint32_t>(window.second + 128) << 23;  // exclusive
    const std::uint32_t batches = (hi - lo) / kBatch;
    Failures failures;
    tbb::parallel_for(std::uint32_t{0}, 2 * batches, [&](std::uint32_t b) {
      const std::uint32_t sign = b % 2 == 0 ? 0U : 0x80000000U;
      const std::uint32_t start = lo + (b / 2) * static_cast<std::uint32_t>(kBatch);
      // Batch b checks the float32 whose low bits equal (b / 2) mod kStride: over the window every
      // low-bit pattern is checked, and each batch spans all of its high mantissa bits.
      const std::uint32_t offset = (b / 2) % kStride;
      std::vector<float> in(kBatch / kStride);
      for (std::size_t i = 0; i < in.size(); ++i)
        in[i] = std::bit_cast<float>(sign | (start + static_cast<std::uint32_t>(i) * kStride + offset));
      // The scalar generic path costs ~4x the rest: it sees every 4th input here, every input in
      // the boundary-set test and in the slow full sweep.
      lpemu::test::ref::Paths paths;
      paths.scalar_stride = 4;
      check_batch(f, t, in, ConvertOptions{}, failures, paths);
    });
    INFO(f.name << ": window of float32 exponents [" << window.first << ", " << window.second << "]");
    report(failures);
    CHECK(failures.checked.load() == 2ULL * (hi - lo) / kStride);
    total += failures.checked.load();
  });
  CHECK(total > 100'000'000ULL);
}

TEST_CASE("every mode and policy converts the boundary set and a strided interior as the reference",
          "[format][exhaustive]") {
  for_each_builtin_format([](const Format& f) {
    if (f.bits > 16) return;
    const Table t(f);
    std::vector<float> inputs = lpemu::test::ref::boundary_set(t, f);
    if (f.bits <= 8) {
      // e8m0 (no zero): its window is every float32; it is covered by this sample only.
      const auto strided = lpemu::test::ref::strided_window(lpemu::test::ref::interesting_window(t, f),
                                                            f.has_zero ? 2039U : 4093U);
      inputs.insert(inputs.end(), strided.begin(), strided.end());
    }
    struct Variant {
      RoundingMode mode;
      int sr_bits;
      bool ftz, daz;
    };
    std::vector<Variant> variants;
    for (const auto m : kAllRoundingModes) variants.push_back({m, 32, false, false});
    variants.push_back({RoundingMode::stochastic, 1, false, false});
    variants.push_back({RoundingMode::stochastic, 5, false, false});
    variants.push_back({RoundingMode::nearest_even, 32, true, false});
    variants.push_back({RoundingMode::nearest_even, 32, false, true});
    variants.push_back({RoundingMode::toward_positive, 32, true, true});
    for (const auto policy : kAllOverflowPolicies) {
      for (const auto& v : variants) {
        ConvertOptions o;
        o.rounding = v.mode;
        o.overflow = policy;
        o.sr_bits = v.sr_bits;
        o.seed = 0x5eed;
        o.index_offset = 1'000'003;
        o.flush_subnormal_outputs = v.ftz;
        o.flush_subnormal_inputs = v.daz;
        Failures failures;
        check_all(f, t, inputs, o, failures);
        INFO(f.name << " " << to_string(v.mode) << " " << to_string(policy) << " sr_bits " << v.sr_bits
                    << " ftz " << v.ftz << " daz " << v.daz << ": " << inputs.size() << " inputs");
        report(failures);
      }
    }
  });
}

TEST_CASE("bulk fast path equals the scalar generic path for bf16 fp16 and tf32 on random bit patterns",
          "[format][exhaustive]") {
  const auto& reg = Registry::builtin();
  std::mt19937_64 rng(20261202);
  std::vector<float> in(1 << 20);
  for (auto& x : in) x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  for (const char* name : {"bf16", "fp16", "tf32"}) {
    const Format& f = reg.get(name);
    for (const auto mode : kAllRoundingModes) {
      for (const auto policy : kAllOverflowPolicies) {
        for (const bool ftz : {false, true}) {
          ConvertOptions o;
          o.rounding = mode;
          o.overflow = policy;
          o.seed = 99;
          o.sr_bits = mode == RoundingMode::stochastic ? 7 : 32;
          o.flush_subnormal_outputs = ftz;
          o.flush_subnormal_inputs = ftz;
          std::vector<std::uint32_t> codes(in.size());
          std::vector<float> values(in.size());
          encode(f, std::span<const float>(in), std::span<std::uint32_t>(codes), o);
          quantize(f, std::span<const float>(in), std::span<float>(values), o);
          std::size_t bad = 0;
          for (std::size_t i = 0; i < in.size(); ++i) {
            const std::uint64_t want = encode(f, in[i], o, i);
            const double want_v = quantize(f, in[i], o, i);
            const bool ok_v = std::isnan(want_v) ? std::isnan(values[i])
                                                 : std::bit_cast<std::uint32_t>(static_cast<float>(want_v)) ==
                                                       std::bit_cast<std::uint32_t>(values[i]);
            if ((codes[i] != want || !ok_v) && bad++ < 5) {
              FAIL_CHECK(name << " " << to_string(mode) << " " << to_string(policy) << " ftz/daz " << ftz
                              << ": input 0x" << std::hex << std::bit_cast<std::uint32_t>(in[i]) << " ("
                              << in[i] << "): generic code 0x" << want << ", bulk 0x" << codes[i]
                              << "; generic value " << want_v << ", bulk " << values[i] << std::dec);
            }
          }
          CHECK(bad == 0);
        }
      }
    }
  }
}

}  // namespace
