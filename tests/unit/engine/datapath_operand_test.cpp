// Operands enter a datapath as the plan made them: codes and scales from lpemu::block::encode,
// checked against the datapath's own rule (lpemu::datapath::dot) on codes and scales derived here.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/datapath/dot.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/evaluation.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu::engine;
namespace blk = lpemu::block;
namespace dpn = lpemu::datapath;
namespace fmt = lpemu::format;

TEST_CASE("encode_values gives each element's own code and names the first value outside the format",
          "[engine][unit]") {
  const fmt::Format& e4m3 = fmt::Registry::builtin().get("fp8_e4m3");
  // 3 x 20000 values (pieces of the encoding span rows), every fp8_e4m3 code's value in turn.
  RowMatrix x(3, 20000);
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const auto code = static_cast<std::uint64_t>(i % 256);
    x.data()[i] = std::isnan(fmt::decode(e4m3, code)) ? 1.0F : static_cast<float>(fmt::decode(e4m3, code));
  }
  const EncodedOperand enc = encode_values(x, e4m3, "test");
  REQUIRE(enc.tensor.codes.size() == static_cast<std::size_t>(x.size()));
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    if (enc.tensor.codes[static_cast<std::size_t>(i)] != fmt::encode(e4m3, x.data()[i]))
      FAIL("element " << i);
  }
  // Two values outside the format: the first in element order is named, wherever the pieces run.
  x(2, 19999) = 0.3F;
  x(1, 100) = 1.0625F;
  CHECK_THROWS_WITH(encode_values(x, e4m3, "test"),
                    "test: value 1.062500 (element 20100) is not a value of 'fp8_e4m3'; quantise the "
                    "operand to it first");
  CHECK(encode_values(RowMatrix(0, 4), e4m3, "test").tensor.codes.empty());
}

RowMatrix random_matrix(Eigen::Index r, Eigen::Index c, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0F, 1.0F);
  RowMatrix x(r, c);
  for (Eigen::Index i = 0; i < x.size(); ++i)
    x.data()[i] = nd(rng) * std::ldexp(1.0F, static_cast<int>(rng() % 9) - 4);
  return x;
}

// A scale value as (exponent, integer significand), computed here from the scale's value.
void scale_parts(double v, int mantissa_bits, std::int32_t& e, std::uint32_t& sig) {
  if (std::isnan(v)) {
    e = dpn::kNanScale;
    sig = 1;
  } else if (v == 0.0) {
    e = 0;
    sig = 0;
  } else {
    int x = 0;
    (void)std::frexp(v, &x);  // v = f·2^x, f in [0.5, 1)
    e = x - 1 - mantissa_bits;
    sig = static_cast<std::uint32_t>(std::ldexp(v, -e));
    REQUIRE(std::ldexp(static_cast<double>(sig), e) == v);
  }
}

// C[i, j] by the datapath's rule, one dot() per element on block::encode's codes and scales, then
// FP32 epilogue factors (per-row / per-tensor scales and the tensor scale) as fp32(fp32(s_a·s_b)·acc).
RowMatrix reference_gemm(const dpn::Datapath& dp, const blk::BlockFormat& fa, const RowMatrix& a,
                         const blk::BlockFormat& fb, const RowMatrix& b) {
  const std::size_t m = static_cast<std::size_t>(a.rows()), n = static_cast<std::size_t>(b.rows()),
                    k = static_cast<std::size_t>(a.cols());
  const std::size_t sa_shape[2] = {m, k}, sb_shape[2] = {n, k};
  const blk::BlockTensor ta = blk::encode(fa, std::span<const float>(a.data(), m * k), sa_shape);
  const blk::BlockTensor tb = blk::encode(fb, std::span<const float>(b.data(), n * k), sb_shape);
  const auto along_k = [](const blk::BlockFormat& f) { return f.granularity == blk::Granularity::block; };
  const auto epi = [](const blk::BlockFormat& f, const blk::BlockTensor& t, std::size_t row) {
    if (f.granularity == blk::Granularity::block) return t.tensor_scale;
    const std::size_t at = f.granularity == blk::Granularity::per_tensor ? 0 : row;
    return static_cast<float>(blk::scale_value(f, t.scales[at])) * t.tensor_scale;
  };
  RowMatrix c(a.rows(), b.rows());
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      std::vector<std::uint64_t> ra(k), rb(k);
      for (std::size_t t = 0; t < k; ++t) {
        ra[t] = fmt::encode(dp.a, fmt::decode(fa.element, ta.codes[i * k + t]));
        rb[t] = fmt::encode(dp.b, fmt::decode(fb.element, tb.codes[j * k + t]));
      }
      std::vector<std::int32_t> ea, eb;
      std::vector<std::uint32_t> ma, mb;
      if (along_k(fa)) {
        const std::size_t kb = (k + fa.block_size - 1) / fa.block_size;
        for (std::size_t q = 0; q < kb; ++q) {
          std::int32_t e = 0;
          std::uint32_t s = 0;
          scale_parts(blk::scale_value(fa, ta.scales[i * kb + q]), fa.scale.mantissa_bits, e, s);
          ea.push_back(e);
          ma.push_back(s);
          scale_parts(blk::scale_value(fb, tb.scales[j * kb + q]), fb.scale.mantissa_bits, e, s);
          eb.push_back(e);
          mb.push_back(s);
        }
      }
      const std::uint64_t d = dpn::dot(dp, ra, rb, 0, dpn::BlockScales{ea, eb, ma, mb}, i * n + j);
      const auto acc = static_cast<float>(fmt::decode(dp.output(), d));
      const float ga = epi(fa, ta, i), gb = epi(fb, tb, j);
      c(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) =
          (ga == 1.0F && gb == 1.0F) ? acc : (ga * gb) * acc;
    }
  }
  return c;
}

// The engine's GEMM on operands encoded by quantisers of fa / fb, compared bit for bit.
void check_scale_kind(const char* datapath, const blk::BlockFormat& fa, const blk::BlockFormat& fb,
                      Eigen::Index k) {
  INFO(datapath << " " << fa.name << " x " << fb.name);
  const auto& dp = dpn::DatapathRegistry::builtin().get(datapath);
  REQUIRE(datapath_entry_problem(dp, true, fa.element, &fa).empty());
  REQUIRE(datapath_entry_problem(dp, false, fb.element, &fb).empty());
  const RowMatrix a0 = random_matrix(5, k, 1), b0 = random_matrix(6, k, 2);
  RowMatrix a = a0, b = b0, c;
  QuantPoint p;
  const auto qa = make_block_quantizer(fa, QuantSpec{});
  const auto qb = make_block_quantizer(fb, QuantSpec{});
  const EncodedOperand ea = qa->encode(a, p);
  const EncodedOperand eb = qb->encode(b, p);
  GemmPoint gp{0, LayerKind::mlp, "w1", fa.name, fb.name};
  gp.a_operand = &ea;
  gp.b_operand = &eb;
  const auto gemm = GemmFactory::builtin().make(datapath);
  gemm->nt(a, b, c, gp);
  const RowMatrix want = reference_gemm(dp, fa, a0, fb, b0);
  for (Eigen::Index i = 0; i < c.rows(); ++i) {
    for (Eigen::Index j = 0; j < c.cols(); ++j) {
      INFO("(" << i << ", " << j << ")");
      CHECK(std::bit_cast<std::uint32_t>(c(i, j)) == std::bit_cast<std::uint32_t>(want(i, j)));
    }
  }
  // B held only encoded (a session's weight): an empty b beside its operand gives the same bits.
  RowMatrix c_encoded;
  gemm->nt(a, RowMatrix(), c_encoded, gp);
  REQUIRE(c_encoded.rows() == c.rows());
  REQUIRE(c_encoded.cols() == c.cols());
  CHECK(std::memcmp(c_encoded.data(), c.data(), sizeof(float) * static_cast<std::size_t>(c.size())) == 0);
  // An encoding that is not whole rows of K is named.
  EncodedOperand torn = eb;
  torn.tensor.codes.pop_back();
  gp.b_operand = &torn;
  CHECK_THROWS_WITH(gemm->nt(a, RowMatrix(), c_encoded, gp), Catch::Contains("whole number of rows"));
}

blk::BlockFormat block_format(const std::string& text) {
  return blk::parse_block_format_toml(text, "test.toml", fmt::Registry::builtin());
}

TEST_CASE("MX operands enter a block-scaled datapath with their E8M0 scales", "[engine][datapath]") {
  const auto& mx = blk::BlockRegistry::builtin().get("mxfp8_e4m3");
  check_scale_kind("b200_mxfp8_fp32", mx, mx, 96);
  const auto& mx4 = blk::BlockRegistry::builtin().get("mxfp4");
  check_scale_kind("b200_mxfp4_fp32", mx4, mx4, 64);
}

TEST_CASE("NVFP4 operands enter b200_nvfp4_fp32 with E4M3 block scales and an FP32 tensor scale",
          "[engine][datapath]") {
  const auto& nv = blk::BlockRegistry::builtin().get("nvfp4");
  check_scale_kind("b200_nvfp4_fp32", nv, nv, 80);
}

TEST_CASE("per-tensor and per-channel FP32 scales are applied after accumulation", "[engine][datapath]") {
  const auto& pt = blk::BlockRegistry::builtin().get("fp8_e4m3_per_tensor");
  check_scale_kind("h100_e4m3_fp32", pt, pt, 70);
  // Per output channel of B [n, K] and per token of A [m, K]: one FP32 scale per row.
  const auto per_row = block_format(
      "name = \"fp8_e4m3_per_row\"\nsource = \"test\"\nelement = \"fp8_e4m3\"\nscale = \"fp32\"\n"
      "granularity = \"per_row\"\nscale_rule = \"amax_over_max\"\n");
  check_scale_kind("h100_e4m3_fp32", per_row, per_row, 70);
  check_scale_kind("h100_e4m3_fp32", pt, per_row, 33);
}

TEST_CASE("operands that cannot enter a datapath exactly are named with it", "[engine][datapath]") {
  const auto& reg = dpn::DatapathRegistry::builtin();
  const auto& h100 = reg.get("h100_e4m3_fp32");
  const auto& e4 = fmt::Registry::builtin().get("fp8_e4m3");
  CHECK(datapath_entry_problem(h100, true, e4, nullptr).empty());
  CHECK_FALSE(datapath_entry_problem(h100, true, fmt::Registry::builtin().get("bf16"), nullptr).empty());
  CHECK_FALSE(datapath_entry_problem(reg.get("b200_mxfp4_fp32"), true,
                                     fmt::Registry::builtin().get("fp4_e2m1"),
                                     &blk::BlockRegistry::builtin().get("nvfp4"))
                  .empty());
  CHECK_FALSE(
      datapath_entry_problem(h100, true, e4, &blk::BlockRegistry::builtin().get("mxfp8_e4m3")).empty());
  // fp8_e4m3 values all lie in bf16: they enter a bf16 datapath exactly.
  CHECK(datapath_entry_problem(reg.get("h100_bf16_fp32"), true, e4, nullptr).empty());

  const auto q = QuantizerFactory::standard(fmt::Registry::builtin());
  const auto gemms = GemmFactory::builtin();
  const Model m = load_model(lpemu::test::source_path("data/models/stories260K/model.h5"));
  const std::string plan_text =
      "[roles]\nweights = \"bf16\"\nlinear_input = \"bf16\"\ngemm = \"h100_e4m3_fp32\"\n"
      "[[override]]\nkind = \"head\"\ngemm = \"none\"\n";
  const PrecisionPlan bad = parse_plan_toml(plan_text, "bf16_on_h100.toml", q, gemms);
  SessionOptions o;
  o.quantizers = &q;
  o.gemms = &gemms;
  CHECK_THROWS_WITH(Session(m, bad, o), Catch::Matchers::Contains("bf16_on_h100.toml:4") &&
                                            Catch::Matchers::Contains("'bf16'") &&
                                            Catch::Matchers::Contains("'h100_e4m3_fp32'") &&
                                            Catch::Matchers::Contains("convert = true"));

  // The explicit spelling converts, and each conversion is a quantisation point of its own.
  const PrecisionPlan ok = parse_plan_toml(
      "[roles]\nweights = \"bf16\"\nlinear_input = \"bf16\"\ngemm = { datapath = \"h100_e4m3_fp32\", convert "
      "= true }\n"
      "[[override]]\nkind = \"head\"\ngemm = \"none\"\n",
      "convert.toml", q, gemms);
  const GemmChoice g = ok.resolve_gemm_site(0, LayerKind::attention, "wq", 5);
  CHECK(g.datapath == "h100_e4m3_fp32");
  CHECK(g.convert);
  CHECK(ok.resolve_gemm_site(-1, LayerKind::head, "output", 5).datapath == "eigen");
  CHECK(ok.resolve_gemm_site(0, LayerKind::attention, "qk", 5).datapath == "eigen");
  CHECK_THROWS_AS(ok.resolve_gemm_site(0, LayerKind::attention, "wx", 5), lpemu::SpecError);
  std::vector<std::string> points;
  o.on_quant = [&](const QuantPoint& p, const RowMatrix&, const RowMatrix&) {
    if (p.layer == 0) points.emplace_back(p.tensor);
  };
  Session s(m, ok, o);
  const std::vector<int> tokens{1, 403, 407, 261};
  const RowMatrix logits = s.forward(tokens);
  CHECK(logits.allFinite());
  for (const char* t : {"wq.convert_a", "wq.convert_b", "w2.convert_a", "w2.convert_b"}) {
    INFO(t);
    CHECK(std::find(points.begin(), points.end(), t) != points.end());
  }
}

// Wraps the b200_nvfp4_fp32 strategy: checks that each operand's codes × scales × tensor scale are
// exactly the float values the plan's quantisers produced, then runs the real datapath.
class CheckingGemm final : public Gemm {
 public:
  explicit CheckingGemm(std::shared_ptr<const Gemm> inner) : inner_(std::move(inner)) {}
  const std::string& name() const override { return inner_->name(); }
  const dpn::Datapath* datapath() const override { return inner_->datapath(); }
  void nt(const RowMatrix& a, const RowMatrix& b, RowMatrix& c, const GemmPoint& p) const override {
    check(a, p.a_operand);
    check(b, p.b_operand);
    inner_->nt(a, b, c, p);
  }
  mutable std::size_t checked = 0, mismatches = 0, inexact = 0;

 private:
  void check(const RowMatrix& x, const EncodedOperand* e) const {
    REQUIRE(e != nullptr);
    REQUIRE(e->block != nullptr);
    const auto k = static_cast<std::size_t>(x.cols());
    const auto bs = static_cast<std::size_t>(e->block->block_size);
    for (std::size_t i = 0; i < static_cast<std::size_t>(x.size()); ++i) {
      const std::size_t r = i / k, t = i % k;
      const double v = fmt::decode(e->element, e->tensor.codes[i]) *
                       blk::scale_value(*e->block, e->tensor.scales[r * ((k + bs - 1) / bs) + t / bs]) *
                       static_cast<double>(e->tensor.tensor_scale);
      ++checked;
      // The plan's value is decode(): fp32(code · scale · tensor scale); the datapath takes code ·
      // scale exactly and applies the tensor scale after accumulation.
      if (std::bit_cast<std::uint32_t>(static_cast<float>(v)) != std::bit_cast<std::uint32_t>(x.data()[i]))
        ++mismatches;
      if (v != static_cast<double>(x.data()[i])) ++inexact;
    }
  }
  std::shared_ptr<const Gemm> inner_;
};

TEST_CASE("stories260K with NVFP4 operands on b200_nvfp4_fp32 loses no more than on fp32 accumulation",
          "[engine][datapath][model]") {
  const auto q = QuantizerFactory::standard(fmt::Registry::builtin());
  GemmFactory gemms = GemmFactory::builtin();
  auto checking = std::make_shared<CheckingGemm>(gemms.make("b200_nvfp4_fp32"));
  gemms.add("b200_nvfp4_fp32", [checking]() { return std::shared_ptr<const Gemm>(checking); });
  const Model m = load_model(lpemu::test::source_path("data/models/stories260K/model.h5"));
  const std::string roles = "[roles]\nweights = \"nvfp4\"\nlinear_input = \"nvfp4\"\n";
  const PrecisionPlan on_dp =
      parse_plan_toml(roles + "gemm = \"b200_nvfp4_fp32\"\n[[override]]\nkind = \"head\"\ngemm = \"none\"\n",
                      "nvfp4_b200.toml", q, gemms);
  const PrecisionPlan on_fp32 = parse_plan_toml(roles, "nvfp4.toml", q, gemms);
  std::vector<int> tokens{1};
  for (int i = 0; i < 63; ++i) tokens.push_back(3 + (i * 37) % 500);
  const auto ref = builtin_plan("fp32");
  const auto e_dp = lpemu::experiment::evaluate(m, on_dp, ref, tokens, q, gemms);
  const auto e_fp32 = lpemu::experiment::evaluate(m, on_fp32, ref, tokens, q, gemms);
  WARN("mean KL vs fp32: nvfp4 on b200_nvfp4_fp32 " << e_dp.mean_kl << ", nvfp4 on fp32 (eigen) "
                                                    << e_fp32.mean_kl);
  WARN(checking->checked << " operand values checked; " << checking->inexact
                         << " of them are not fp32 values before the plan's rounding to fp32");
  CHECK(checking->checked > 0);
  CHECK(checking->mismatches == 0);
  CHECK(e_dp.mean_kl <= e_fp32.mean_kl * 1.05 + 1e-3);
}

}  // namespace

namespace {

// Records attention GEMMs on a datapath and checks each against dot() on the operands' codes.
class AttentionCheck final : public Gemm {
 public:
  explicit AttentionCheck(std::shared_ptr<const Gemm> inner) : inner_(std::move(inner)) {}
  const std::string& name() const override { return inner_->name(); }
  const dpn::Datapath* datapath() const override { return inner_->datapath(); }
  void nt(const RowMatrix& a, const RowMatrix& b, RowMatrix& c, const GemmPoint& p) const override {
    inner_->nt(a, b, c, p);
    if (p.tensor != "qk" && p.tensor != "pv") return;
    const std::lock_guard<std::mutex> lock(mutex_);
    ++(p.tensor == "qk" ? qk : pv);
    const dpn::Datapath& dp = *inner_->datapath();
    const auto k = static_cast<std::size_t>(a.cols());
    for (Eigen::Index j = 0; j < b.rows(); ++j) {
      std::vector<std::uint64_t> ra(k), rb(k);
      for (std::size_t t = 0; t < k; ++t) {
        ra[t] = fmt::encode(dp.a, static_cast<double>(a(0, static_cast<Eigen::Index>(t))));
        rb[t] = fmt::encode(dp.b, static_cast<double>(b(j, static_cast<Eigen::Index>(t))));
      }
      const double want = fmt::decode(dp.output(), dpn::dot(dp, ra, rb, 0));
      if (static_cast<double>(c(0, j)) != want) ++mismatches;
      ++checked;
    }
  }
  mutable std::size_t qk = 0, pv = 0, checked = 0, mismatches = 0;

 private:
  std::shared_ptr<const Gemm> inner_;
  mutable std::mutex mutex_;
};

TEST_CASE("attention's QK and PV GEMMs run on a datapath named by attention_gemm", "[engine][datapath]") {
  const auto q = QuantizerFactory::standard(fmt::Registry::builtin());
  GemmFactory gemms = GemmFactory::builtin();
  auto check = std::make_shared<AttentionCheck>(gemms.make("h100_e4m3_fp32"));
  gemms.add("h100_e4m3_fp32", [check]() { return std::shared_ptr<const Gemm>(check); });
  const Model m = load_model(lpemu::test::source_path("data/models/stories260K/model.h5"));
  const std::string roles =
      "[roles]\nq = \"fp8_e4m3\"\nk = \"fp8_e4m3\"\nv = \"fp8_e4m3\"\nprobs = \"fp8_e4m3\"\n";
  const PrecisionPlan on_dp = parse_plan_toml(
      roles + "attention_gemm = \"h100_e4m3_fp32\"\n[[override]]\nlayers = [0]\nattention_gemm = \"none\"\n",
      "attn.toml", q, gemms);
  CHECK(on_dp.resolve_gemm_site(1, LayerKind::attention, "qk", 5).datapath == "h100_e4m3_fp32");
  CHECK(on_dp.resolve_gemm_site(1, LayerKind::attention, "pv", 5).datapath == "h100_e4m3_fp32");
  CHECK(on_dp.resolve_gemm_site(0, LayerKind::attention, "qk", 5).datapath == "eigen");
  CHECK(on_dp.resolve_gemm_site(1, LayerKind::attention, "wq", 5).datapath == "eigen");
  const PrecisionPlan plain = parse_plan_toml(roles, "plain.toml", q, gemms);
  SessionOptions o;
  o.quantizers = &q;
  o.gemms = &gemms;
  Session s(m, on_dp, o), r(m, plain, o);
  const std::vector<int> tokens{1, 403, 407, 261, 378};
  const RowMatrix a = s.forward(tokens);
  const RowMatrix b = r.forward(tokens);
  CHECK(a.allFinite());
  CHECK((a - b).cwiseAbs().maxCoeff() < 1.0F);
  CHECK(check->qk == 4u * static_cast<std::size_t>(m.config.n_heads));  // layers 1..4
  CHECK(check->pv == check->qk);
  CHECK(check->checked > 0);
  CHECK(check->mismatches == 0);
  // Unquantised queries cannot enter an FP8 datapath.
  const PrecisionPlan bad =
      parse_plan_toml("[roles]\nattention_gemm = \"h100_e4m3_fp32\"\n", "bad_attn.toml", q, gemms);
  CHECK_THROWS_WITH(Session(m, bad, o), Catch::Matchers::Contains("bad_attn.toml:2") &&
                                            Catch::Matchers::Contains("attention GEMM 'qk'") &&
                                            Catch::Matchers::Contains("'fp32'") &&
                                            Catch::Matchers::Contains("'h100_e4m3_fp32'"));
}

}  // namespace

TEST_CASE(
    "an element quantiser's encoding is its apply() and each value's own code, stochastic rounding included",
    "[engine][unit]") {
  const QuantizerFactory q = QuantizerFactory::standard(fmt::Registry::builtin());
  std::mt19937 g(3);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  RowMatrix x(3, 20000);  // pieces of the encoding span rows
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = normal(g) * (i % 7 == 0 ? 1000.0F : 1.0F);
  x(1, 5) = std::numeric_limits<float>::infinity();
  x(2, 7) = -0.0F;
  for (const char* name : {"fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "bf16"}) {
    for (const auto mode : {fmt::RoundingMode::nearest_even, fmt::RoundingMode::stochastic}) {
      INFO(name << " " << fmt::to_string(mode));
      QuantSpec spec;
      spec.format = name;
      spec.options.rounding = mode;
      spec.options.seed = 7;
      // Infinity saturates under one, becomes NaN (or the format's largest value) under the other.
      spec.options.overflow =
          mode == fmt::RoundingMode::stochastic ? fmt::Overflow::native : fmt::Overflow::saturate;
      const std::unique_ptr<Quantizer> qz = q.make(spec);
      QuantPoint p;
      p.role = Role::linear_input;
      p.tensor = "wq";
      p.stream = 12345;
      p.index_offset = 777;
      RowMatrix applied = x, encoded = x;
      qz->apply(applied, p);
      const EncodedOperand e = qz->encode(encoded, p);
      CHECK(e.format == name);
      REQUIRE(e.tensor.codes.size() == static_cast<std::size_t>(x.size()));
      const fmt::Format& f = fmt::Registry::builtin().get(name);
      int bad = 0;
      for (Eigen::Index i = 0; i < x.size(); ++i) {
        const float a = applied.data()[i];
        const std::uint32_t code = e.tensor.codes[static_cast<std::size_t>(i)];
        const bool ok = lpemu::test::same_bits_or_nan(encoded.data()[i], a) &&
                        (std::isnan(a) ? std::isnan(fmt::decode(f, code)) : code == fmt::encode(f, a));
        if (!ok && bad++ < 3) FAIL_CHECK("element " << i << ": " << x.data()[i]);
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("datapath_operand_problem: the one entry check's message, with and without a role",
          "[engine][datapath]") {
  const auto& reg = dpn::DatapathRegistry::builtin();
  const auto& h100 = reg.get("h100_e4m3_fp32");
  const auto q = QuantizerFactory::standard(fmt::Registry::builtin());
  QuantSpec e4, bf, mx, nv;
  e4.format = "fp8_e4m3";
  bf.format = "bf16";
  mx.format = "mxfp8_e4m3";
  nv.format = "nvfp4";
  const auto qe4 = q.make(e4), qbf = q.make(bf), qmx = q.make(mx), qnv = q.make(nv);
  CHECK(datapath_operand_problem(h100, true, qe4.get(), "").empty());
  CHECK(datapath_operand_problem(h100, false, qe4.get(), "weights", "no blocks").empty());
  // The message names side, role, format and datapath, then the datapath_entry_problem reason.
  CHECK(datapath_operand_problem(h100, true, qbf.get(), "linear_input") ==
        "operand A (linear_input) in format 'bf16' cannot enter datapath 'h100_e4m3_fp32' exactly: " +
            datapath_entry_problem(h100, true, fmt::Registry::builtin().get("bf16"), nullptr));
  // Unquantised operands are fp32 values; no role, no parentheses.
  CHECK(datapath_operand_problem(h100, false, nullptr, "") ==
        "operand B in format 'fp32' cannot enter datapath 'h100_e4m3_fp32' exactly: " +
            datapath_entry_problem(h100, false, fmt::Registry::builtin().get("fp32"), nullptr));
  // Block scales: checked against the datapath's, or refused by the caller's reason.
  CHECK(datapath_operand_problem(h100, true, qmx.get(), "") ==
        "operand A in format 'mxfp8_e4m3' cannot enter datapath 'h100_e4m3_fp32' exactly: " +
            datapath_entry_problem(h100, true, qmx->element_format(), qmx->block_format()));
  const auto& b200 = reg.get("b200_nvfp4_fp32");
  CHECK(datapath_operand_problem(b200, true, qnv.get(), "q").empty());
  CHECK(
      datapath_operand_problem(b200, true, qnv.get(), "q", "element codes only") ==
      "operand A (q) in format 'nvfp4' cannot enter datapath 'b200_nvfp4_fp32' exactly: element codes only");
}
