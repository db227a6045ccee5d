// Edge cases of block quantisation, expected values worked out by hand from the rules in
// docs/block-formats.md (OCP MX v1.0 shared-scale rule; microxcaling behaviour).
#include <cmath>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/pack.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/error.hpp"
#include "support/test_support.hpp"

namespace {

using lpemu::block::BlockFormat;
using lpemu::block::BlockRegistry;
namespace lb = lpemu::block;

const BlockFormat& fmt(const char* name) { return BlockRegistry::builtin().get(name); }

std::vector<float> q(const BlockFormat& f, const std::vector<float>& x, std::vector<std::size_t> shape = {}) {
  if (shape.empty()) shape = {x.size()};
  std::vector<float> out(x.size());
  lb::quantize(f, x, out, shape);
  // The generic path and decode(encode) must agree bit for bit with the fast path.
  std::vector<float> gen(x.size()), dec(x.size());
  lb::detail::quantize_generic(f, x, gen, shape);
  lb::decode(f, lb::encode(f, x, shape), dec);
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO(f.name << " element " << i << " input " << lpemu::test::hex32(x[i]));
    CHECK(lpemu::test::same_bits_or_nan(out[i], gen[i]));
    CHECK(lpemu::test::same_bits_or_nan(out[i], dec[i]));
  }
  return out;
}

bool bits_equal(float a, float b) {
  return std::signbit(a) == std::signbit(b) && (a == b || (std::isnan(a) && std::isnan(b)));
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST_CASE("a NaN or Inf makes its whole MX block NaN with scale code 0xFF", "[block][unit]") {
  std::vector<float> x(64, 1.0F);
  x[3] = kNaN;
  x[40] = -kInf;
  const auto out = q(fmt("mxfp8_e4m3"), x);
  for (std::size_t i = 0; i < 64; ++i) CHECK(std::isnan(out[i]));
  const auto t = lb::encode(fmt("mxfp8_e4m3"), x, std::vector<std::size_t>{64});
  CHECK(t.scales == std::vector<std::uint32_t>{0xFF, 0xFF});
  x[40] = 2.0F;
  const auto out2 = q(fmt("mxfp8_e4m3"), x);
  CHECK(std::isnan(out2[0]));
  CHECK(out2[32] == 1.0F);
  CHECK(out2[40] == 2.0F);
}

TEST_CASE("nonfinite = ignore scales by the finite elements and saturates Inf", "[block][unit]") {
  BlockFormat f = fmt("mxfp8_e4m3");
  f.nonfinite = lb::NonFinite::ignore;
  std::vector<float> x(32, 0.0F);
  x[0] = 3.0F;  // amax 3 = 1.5·2^1: shared exponent 1 − 8 = −7
  x[1] = kInf;  // saturates to 448·2^−7 = 3.5
  x[2] = -kInf;
  x[3] = kNaN;
  const auto out = q(f, x);
  CHECK(out[0] == 3.0F);
  CHECK(out[1] == 3.5F);
  CHECK(out[2] == -3.5F);
  CHECK(std::isnan(out[3]));
}

TEST_CASE("an all-zero block gets the smallest E8M0 scale and keeps zero signs", "[block][unit]") {
  std::vector<float> x(32, 0.0F);
  x[5] = -0.0F;
  const auto out = q(fmt("mxfp4"), x);
  for (std::size_t i = 0; i < 32; ++i) CHECK(bits_equal(out[i], i == 5 ? -0.0F : 0.0F));
  const auto t = lb::encode(fmt("mxfp4"), x, std::vector<std::size_t>{32});
  CHECK(t.scales[0] == 0x00);  // 2^-127
  CHECK(t.codes[5] == 0x8);    // E2M1 −0
  BlockFormat pos = fmt("mxfp4");
  pos.signed_zero = lb::SignedZero::positive;
  const auto out2 = q(pos, x);
  CHECK(bits_equal(out2[5], 0.0F));
}

TEST_CASE("negative values that round to zero give -0 unless signed_zero = positive", "[block][unit]") {
  std::vector<float> x(32, 0.0F);
  x[0] = 6.0F;    // shared exponent 0
  x[1] = -0.2F;   // below half of the smallest step 0.5: −0
  x[2] = 0.25F;   // tie between 0 and 0.5: even → 0
  x[3] = -0.75F;  // tie between 0.5 and 1: even → −1
  const auto out = q(fmt("mxfp4"), x);
  CHECK(bits_equal(out[1], -0.0F));
  CHECK(bits_equal(out[2], 0.0F));
  CHECK(out[3] == -1.0F);
  BlockFormat pos = fmt("mxfp4");
  pos.signed_zero = lb::SignedZero::positive;
  CHECK(bits_equal(q(pos, x)[1], 0.0F));
}

TEST_CASE("scale underflow clamps to 2^-127 and elements underflow exactly", "[block][unit]") {
  // amax = 2^-140 (a float32 subnormal): OCP exponent −140 − 8 = −148, clamped to −127.
  std::vector<float> x(32, 0.0F);
  x[0] = std::ldexp(1.0F, -140);
  x[1] = std::ldexp(1.0F, -136);  // 2^-136 / 2^-127 = 2^-9: the smallest E4M3 subnormal, kept
  x[2] = std::ldexp(3.0F, -138);  // 3·2^-138/2^-127 = 1.5·2^-10: rounds to 2^-9 (above the half step)
  const auto out = q(fmt("mxfp8_e4m3"), x);
  CHECK(out[0] == 0.0F);  // 2^-13 is below half the smallest step 2^-9
  CHECK(out[1] == std::ldexp(1.0F, -136));
  CHECK(out[2] == std::ldexp(1.0F, -136));
  CHECK(lb::encode(fmt("mxfp8_e4m3"), x, std::vector<std::size_t>{32}).scales[0] == 0x00);
}

TEST_CASE("float32 subnormal inputs: keep, flush, flush_block", "[block][unit]") {
  std::vector<float> x(64, 0.0F);
  x[0] = std::ldexp(1.0F, -130);  // block 0: amax subnormal
  x[1] = -std::ldexp(1.0F, -131);
  x[32] = 1.0F;  // block 1: amax normal, one subnormal element
  x[33] = std::ldexp(1.0F, -140);
  const auto keep = q(fmt("mxfp8_e4m3"), x);
  CHECK(keep[0] == std::ldexp(1.0F, -130));  // exponent −138 → −127; 2^-3 and 2^-4 are E4M3 values
  CHECK(keep[1] == -std::ldexp(1.0F, -131));
  CHECK(keep[33] == 0.0F);  // 2^-140 / 2^-8 = 2^-132, far below E4M3's 2^-9
  BlockFormat flush = fmt("mxfp8_e4m3");
  flush.subnormal_inputs = lb::SubnormalInputs::flush;
  const auto fl = q(flush, x);
  CHECK(bits_equal(fl[0], 0.0F));
  CHECK(bits_equal(fl[1], -0.0F));
  BlockFormat fb = fmt("mxfp8_e4m3");
  fb.subnormal_inputs = lb::SubnormalInputs::flush_block;
  const auto b = q(fb, x);
  CHECK(bits_equal(b[0], 0.0F));
  CHECK(bits_equal(b[1], -0.0F));
  CHECK(b[32] == 1.0F);
}

TEST_CASE("amax just below a power of two uses the lower binade (no float log2)", "[block][unit]") {
  // nextafter(2^k, 0): floor(log2) read from the bits is k−1, so the scale is 2^(k−1−emax).
  for (int k : {-100, -3, 3, 17, 100, 127}) {
    INFO("k = " << k);
    std::vector<float> x(32, 0.0F);
    x[0] = std::nextafter(std::ldexp(1.0F, k), 0.0F);
    const auto t = lb::encode(fmt("mxfp4"), x, std::vector<std::size_t>{32});
    CHECK(static_cast<int>(t.scales[0]) - 127 == std::max(k - 1 - 2, -127));
    // The element (2 − 2^-23)·2^2 rounds to 8 > 6 and is clamped to 6.
    CHECK(q(fmt("mxfp4"), x)[0] == std::ldexp(6.0F, std::max(k - 3, -127)));
  }
}

TEST_CASE("scale overflow: NaN block, or clamp and saturate", "[block][unit]") {
  BlockFormat f = fmt("mxint8");
  f.rule = lb::ScaleRule::ceil;  // amax = FLT_MAX needs 2^128 ≥ FLT_MAX / 1.984375
  std::vector<float> x(32, 1.0F);
  x[0] = std::numeric_limits<float>::max();
  auto out = q(f, x);
  CHECK(std::isnan(out[0]));
  CHECK(std::isnan(out[1]));
  f.scale_overflow = lb::ScaleOverflow::clamp;
  out = q(f, x);
  CHECK(out[0] == static_cast<float>(127.0 / 64.0 * std::ldexp(1.0, 127)));
}

TEST_CASE("an axis that is not a multiple of the block behaves as zero padding", "[block][unit]") {
  std::vector<float> x(40);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.37F * static_cast<float>(i) - 5.0F;
  const auto out = q(fmt("mxfp4"), x);
  std::vector<float> padded(x.begin() + 32, x.end());
  padded.resize(32, 0.0F);
  const auto ref = q(fmt("mxfp4"), padded);
  for (std::size_t i = 32; i < 40; ++i) CHECK(bits_equal(out[i], ref[i - 32]));
  CHECK(lb::encode(fmt("mxfp4"), x, std::vector<std::size_t>{40}).scales.size() == 2);
}

TEST_CASE("blocks across an axis equal blocks along the transposed axis", "[block][unit]") {
  const std::size_t R = 70, C = 5;
  std::vector<float> x(R * C), xt(R * C);
  for (std::size_t r = 0; r < R; ++r) {
    for (std::size_t c = 0; c < C; ++c) {
      const float v =
          std::ldexp(static_cast<float>((r * 7919 + c * 104729) % 1000) - 500.0F, static_cast<int>(c) - 3);
      x[r * C + c] = v;
      xt[c * R + r] = v;
    }
  }
  BlockFormat across = fmt("mxfp8_e5m2");
  across.axis = 0;
  const auto a = q(across, x, {R, C});
  const auto b = q(fmt("mxfp8_e5m2"), xt, {C, R});
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t c = 0; c < C; ++c) CHECK(bits_equal(a[r * C + c], b[c * R + r]));
  // per_column of X equals per_row of X^T.
  BlockFormat pc = fmt("int8_per_channel"), pr = fmt("int8_per_token");
  const auto c1 = q(pc, x, {R, C});
  const auto r1 = q(pr, xt, {C, R});
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t c = 0; c < C; ++c) CHECK(bits_equal(c1[r * C + c], r1[c * R + r]));
}

TEST_CASE("layouts count blocks per granularity", "[block][unit]") {
  const std::vector<std::size_t> shape{3, 100, 260};
  CHECK(lb::make_layout(fmt("mxfp4"), shape).block_count() == 3 * 100 * 9);
  BlockFormat ax1 = fmt("mxfp4");
  ax1.axis = 1;
  CHECK(lb::make_layout(ax1, shape).block_count() == 3 * 4 * 260);
  CHECK(lb::make_layout(fmt("fp8_e4m3_tile128"), shape).block_count() == 3 * 1 * 3);
  CHECK(lb::make_layout(fmt("fp8_e4m3_per_tensor"), shape).block_count() == 1);
  CHECK(lb::make_layout(fmt("int8_per_token"), shape).block_count() == 300);
  CHECK(lb::make_layout(fmt("int8_per_channel"), shape).block_count() == 260);
  BlockFormat bad = fmt("mxfp4");
  bad.axis = 3;
  CHECK_THROWS_WITH(lb::make_layout(bad, shape),
                    "block format 'mxfp4': axis 3 is out of range for a tensor of rank 3");
  CHECK_THROWS_AS(lb::make_layout(fmt("mxfp4"), std::vector<std::size_t>{}), lpemu::ShapeError);
  std::vector<float> in(10), out(9);
  CHECK_THROWS_AS(lb::quantize(fmt("mxfp4"), in, out, std::vector<std::size_t>{10}), lpemu::ShapeError);
}

TEST_CASE("tiles share one scale per 2-D box", "[block][unit]") {
  BlockFormat f = fmt("mxfp8_e4m3");
  f.granularity = lb::Granularity::tile;
  f.tile_rows = 2;
  f.tile_cols = 2;
  // 3×3: tiles {0,1}×{0,1}, {0,1}×{2}, {2}×{0,1}, {2}×{2}
  const std::vector<float> x{1, 2, 300, 4, 5, 6, 7, 8, 9};
  const auto t = lb::encode(f, x, std::vector<std::size_t>{3, 3});
  REQUIRE(t.scales.size() == 4);
  CHECK(static_cast<int>(t.scales[0]) - 127 == 2 - 8);  // amax 5
  CHECK(static_cast<int>(t.scales[1]) - 127 == 8 - 8);  // amax 300
  CHECK(static_cast<int>(t.scales[2]) - 127 == 3 - 8);  // amax 8
  CHECK(static_cast<int>(t.scales[3]) - 127 == 3 - 8);  // amax 9
  (void)q(f, x, {3, 3});
}

TEST_CASE("packing puts element 0 in the low bits of byte 0", "[block][unit]") {
  const std::vector<std::uint32_t> fp4{0x1, 0x2, 0x3, 0xF};
  CHECK(lb::pack_codes(fp4, 4) == std::vector<std::uint8_t>{0x21, 0xF3});
  // FP6: a=0x01 b=0x3F c=0x00 d=0x2A → stream bits a | b<<6 | c<<12 | d<<18 = 0xA80FC1
  const std::vector<std::uint32_t> fp6{0x01, 0x3F, 0x00, 0x2A};
  CHECK(lb::pack_codes(fp6, 6) == std::vector<std::uint8_t>{0xC1, 0x0F, 0xA8});
  CHECK(lb::unpack_codes(lb::pack_codes(fp6, 6), 6, 4) == fp6);
  const std::vector<std::uint32_t> w16{0x1234, 0xABCD};
  CHECK(lb::pack_codes(w16, 16) == std::vector<std::uint8_t>{0x34, 0x12, 0xCD, 0xAB});
  CHECK_THROWS_AS(lb::unpack_codes(std::vector<std::uint8_t>{1}, 6, 4), lpemu::ShapeError);
}

TEST_CASE("packing every width 1..32 matches the bit-stream definition, bit by bit", "[block][unit]") {
  std::uint64_t state = 12345;
  for (int bits = 1; bits <= 32; ++bits) {
    // Whole groups of 8 codes, tails, and both together.
    for (const std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9}, std::size_t{15},
          std::size_t{16}, std::size_t{17}, std::size_t{1001}}) {
      std::vector<std::uint32_t> codes(n);
      for (auto& c : codes) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        c = static_cast<std::uint32_t>(state >> 32);  // bits above the width must be ignored
      }
      // Reference: stream bit i*bits + j is bit j of code i; stream bit k is bit k%8 of byte k/8.
      std::vector<std::uint8_t> want((n * static_cast<std::size_t>(bits) + 7) / 8, 0);
      for (std::size_t i = 0; i < n; ++i) {
        for (int j = 0; j < bits; ++j) {
          const std::size_t k = i * static_cast<std::size_t>(bits) + static_cast<std::size_t>(j);
          if ((codes[i] >> j) & 1U) want[k / 8] = static_cast<std::uint8_t>(want[k / 8] | (1U << (k % 8)));
        }
      }
      INFO("bits " << bits << " n " << n);
      CHECK(lb::pack_codes(codes, bits) == want);
      std::vector<std::uint8_t> into(lb::packed_bytes(n, bits), 0xAA);
      lb::pack_codes_into(codes, bits, into);
      CHECK(into == want);
      std::vector<std::uint32_t> back(n);
      lb::unpack_codes_into(want, bits, back);
      const std::uint32_t mask = bits == 32 ? ~0U : (1U << bits) - 1U;
      for (std::size_t i = 0; i < n; ++i) CHECK(back[i] == (codes[i] & mask));
    }
  }
  std::vector<std::uint8_t> small(1);
  CHECK_THROWS_AS(lb::pack_codes_into(std::vector<std::uint32_t>{1, 2, 3}, 4, small), lpemu::ShapeError);
}

TEST_CASE("NVFP4 two-level scale: worked example", "[block][unit]") {
  // 16 elements, amax 6·448 = 2688: g = 2688/2688 = 1; block scale e4m3(2688/6) = 448.
  std::vector<float> x(32, 0.0F);
  x[0] = 2688.0F;
  x[1] = -1344.0F;  // /448 = −3: exact
  x[2] = 500.0F;    // /448 = 1.116: nearest E2M1 value 1 → 448
  x[16] = 3.0F;     // block 2: amax 3 → 3/6 = 0.5 → S_b 0.5; 3/0.5 = 6
  x[17] = 0.8F;     // 0.8/0.5 = 1.6 → 1.5 → 0.75
  const auto t = lb::encode(fmt("nvfp4"), x, std::vector<std::size_t>{32});
  CHECK(t.tensor_scale == 1.0F);
  CHECK(t.scales == std::vector<std::uint32_t>{0x7E, 0x30});  // 448 = 0'1111'110, 0.5 = 0'0110'000
  const auto out = q(fmt("nvfp4"), x);
  CHECK(out[0] == 2688.0F);
  CHECK(out[1] == -1344.0F);
  CHECK(out[2] == 448.0F);
  CHECK(out[16] == 3.0F);
  CHECK(out[17] == 0.75F);
}

TEST_CASE("per-tensor FP8: scale amax/448 in FP32", "[block][unit]") {
  const std::vector<float> x{896.0F, 1.0F, -2.0F, 3.0F};  // S = 2
  const auto t = lb::encode(fmt("fp8_e4m3_per_tensor"), x, std::vector<std::size_t>{4});
  CHECK(t.scales == std::vector<std::uint32_t>{0x40000000U});  // 2.0f
  const auto out = q(fmt("fp8_e4m3_per_tensor"), x);
  CHECK(out == std::vector<float>{896.0F, 1.0F, -2.0F, 3.0F});
}

}  // namespace

namespace {

TEST_CASE("results beyond FLT_MAX become Inf in float32 output, on every path", "[block][unit]") {
  // ceil with amax = FLT_MAX = (2 − 2^-23)·2^127: s = 120 (1.75·2^127 < amax); the element
  // (2 − 2^-23)·2^7 rounds to 256 (E4M3 step 16 there), and 256·2^120 = 2^128 overflows float32.
  lb::BlockFormat f = fmt("mxfp8_e4m3");
  f.rule = lb::ScaleRule::ceil;
  std::vector<float> x(32, 1.0F);
  x[0] = std::numeric_limits<float>::max();
  x[1] = -std::numeric_limits<float>::max();
  const auto out = q(f, x);
  CHECK(out[0] == kInf);
  CHECK(out[1] == -kInf);
  CHECK(static_cast<int>(lb::encode(f, x, std::vector<std::size_t>{32}).scales[0]) - 127 == 120);
  // NVFP4 at the top of the range: fast, generic and decode(encode) agree (checked inside q).
  std::vector<float> y(16, 2.0F);
  y[3] = std::numeric_limits<float>::max();
  const auto out2 = q(fmt("nvfp4"), y);
  CHECK(std::fabs(out2[3]) >= 3.0e38F);
}

}  // namespace
