// Overflow and underflow counts of training's quantised tensors: for element formats (fp16, IEEE
// overflow to Inf), MX blocks and delayed per-tensor scaling, LinearPlan::range_counts() equals a
// brute-force count over the tensor (limits worked out by hand from each format's definition) and
// metrics::quantization_stats, per role, summed over the step and reset by reset_counts(); the
// attention, activation and logits roles and the optimizer's roles (master_weights, optimizer_state,
// weight_update) equal a brute-force count the same way.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/block/block_format.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/metrics/metrics.hpp"
#include "lpemu/train/attention_plan.hpp"
#include "lpemu/train/backward.hpp"
#include "lpemu/train/linear_plan.hpp"
#include "lpemu/train/optimizer.hpp"
#include "support/tiny_model.hpp"

using namespace lpemu;
using namespace lpemu::train;
using engine::GemmPass;
using engine::Role;
using engine::RowMatrix;

namespace {

// Values spread over 2^-40 .. 2^20 with both signs, some zeros.
RowMatrix wide(std::mt19937& g, int r, int c) {
  std::uniform_real_distribution<double> e(-40.0, 20.0);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  RowMatrix x(r, c);
  for (Eigen::Index i = 0; i < x.size(); ++i)
    x.data()[i] = i % 17 == 0 ? 0.0F : static_cast<float>((i % 2 == 0 ? 1 : -1) * m(g) * std::exp2(e(g)));
  return x;
}

RangeCounts counts_of(const LinearPlan& lp, Role r) {
  const auto& roles = lp.quantised_roles();
  for (std::size_t i = 0; i < roles.size(); ++i)
    if (roles[i] == r) return lp.range_counts()[i];
  FAIL("role not counted");
  return {};
}

}  // namespace

TEST_CASE("fp16 gradients: overflow above 65504, underflow at or below 2^-25", "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  LinearPlan lp(test::read_plan("[roles]\ngrad_output = \"fp16\"\ngrad_weights = \"fp16\"\n"),
                test::builtin_quantizers(), test::builtin_gemms(), c);
  REQUIRE(lp.quantised_roles() == std::vector<Role>{Role::grad_output, Role::grad_weights});
  std::mt19937 g(1);
  RowMatrix dy = wide(g, 12, 40);
  dy(0, 1) = std::exp2(-25.0F);               // a tie: rounds to even, zero
  dy(0, 2) = std::nextafter(65504.0F, 1e9F);  // just above the largest finite: counted
  const RowMatrix x = dy;
  RowMatrix b = RowMatrix::Ones(4, 40);
  quantize_operands(lp.site(0, "w1"), GemmPass::dgrad, 0, dy, b);
  std::uint64_t over = 0, under = 0, finite = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const double v = std::abs(static_cast<double>(x.data()[i]));
    ++finite;
    over += v > 65504.0 ? 1 : 0;
    under += v != 0 && v <= std::exp2(-25.0) ? 1 : 0;
  }
  const RangeCounts n = counts_of(lp, Role::grad_output);
  CHECK(n.elements == finite);
  CHECK(n.overflow == over);
  CHECK(n.underflow == under);
  CHECK(over > 0);
  CHECK(under > 0);
  CHECK(counts_of(lp, Role::grad_weights).elements == 0);
  // Counts add up over the tensors of a role and reset.
  RowMatrix again = x;
  quantize_operands(lp.site(1, "w2"), GemmPass::wgrad, 0, again, b);
  CHECK(counts_of(lp, Role::grad_output).overflow == 2 * over);
  lp.reset_counts();
  CHECK(counts_of(lp, Role::grad_output).elements == 0);
  // Non-finite inputs are not counted; the result dW is counted under grad_weights.
  RowMatrix dw = x;
  dw(1, 1) = std::numeric_limits<float>::infinity();
  quantize_result(lp.site(0, "wq"), GemmPass::wgrad, 0, dw);
  CHECK(counts_of(lp, Role::grad_weights).elements == finite - 1);
}

TEST_CASE("MX blocks: overflow where |x| exceeds 448 times the block's power-of-two scale", "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  LinearPlan lp(test::read_plan("[roles]\nlinear_input = \"mxfp8_e4m3\"\n"), test::builtin_quantizers(),
                test::builtin_gemms(), c);
  std::mt19937 g(2);
  std::normal_distribution<float> d(0.0F, 1.0F);
  RowMatrix x(8, 64);
  for (Eigen::Index i = 0; i < x.size(); ++i)
    x.data()[i] = d(g) * std::exp2(static_cast<float>(i % 5) * 8.0F);
  RowMatrix q = x;
  RowMatrix w = RowMatrix::Ones(4, 64);
  quantize_operands(lp.site(0, "wq"), GemmPass::forward, 0, q, w);
  // OCP MX v1.0 section 6.3: X = 2^(floor(log2(amax of the 32-block)) − emax), emax = 8 for E4M3.
  std::uint64_t over = 0, under = 0;
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    for (Eigen::Index b0 = 0; b0 < x.cols(); b0 += 32) {
      float amax = 0;
      for (Eigen::Index j = b0; j < b0 + 32; ++j) amax = std::max(amax, std::abs(x(r, j)));
      const double limit = 448.0 * std::exp2(std::floor(std::log2(static_cast<double>(amax))) - 8.0);
      for (Eigen::Index j = b0; j < b0 + 32; ++j) {
        over += std::abs(static_cast<double>(x(r, j))) > limit ? 1 : 0;
        under += x(r, j) != 0 && q(r, j) == 0 ? 1 : 0;
      }
    }
  }
  const RangeCounts n = counts_of(lp, Role::linear_input);
  CHECK(n.elements == static_cast<std::uint64_t>(x.size()));
  CHECK(n.overflow == over);
  CHECK(n.underflow == under);
  CHECK(over > 0);
  CHECK(under > 0);
  // The metrics layer's statistics of the same quantisation (as `lpemu quantize --stats` reports them).
  const std::size_t shape[2] = {8, 64};
  const auto st = metrics::quantization_stats(block::BlockRegistry::builtin().get("mxfp8_e4m3"),
                                              std::span<const float>(x.data(), 512),
                                              std::span<const float>(q.data(), 512), shape);
  CHECK(st.clipped + st.nonfinite_outputs == over);
  CHECK(st.flushed == under);
}

TEST_CASE("delayed scaling: overflow above 448 times the history's scale", "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  LinearPlan lp(
      test::read_plan(
          "[roles]\nweights = { format = \"fp8_e4m3\", scaling = \"delayed\", amax_history = 4 }\n"),
      test::builtin_quantizers(), test::builtin_gemms(), c);
  std::mt19937 g(4);
  std::normal_distribution<float> d(0.0F, 1.0F);
  RowMatrix w0(16, 32), w1(16, 32);
  for (Eigen::Index i = 0; i < w0.size(); ++i) {
    w0.data()[i] = d(g);
    w1.data()[i] = 3.0F * d(g);
  }
  RowMatrix a = RowMatrix::Ones(4, 32);
  RowMatrix q0 = w0;
  quantize_operands(lp.site(0, "w3"), GemmPass::forward, 0, a, q0);  // step 0: current scaling
  lp.reset_counts();
  RowMatrix q1 = w1;
  quantize_operands(lp.site(0, "w3"), GemmPass::forward, 1, a, q1);  // step 1: step 0's amax
  const double s = static_cast<float>(static_cast<double>(w0.cwiseAbs().maxCoeff()) / 448.0);
  std::uint64_t over = 0;
  for (Eigen::Index i = 0; i < w1.size(); ++i)
    over += std::abs(static_cast<double>(w1.data()[i])) > 448.0 * s;
  CHECK(over > 0);
  CHECK(counts_of(lp, Role::weights).overflow == over);
  CHECK(counts_of(lp, Role::weights).elements == static_cast<std::uint64_t>(w1.size()));
}

namespace {

// The brute-force range counts of quantising x by block format f (nearest rounding): limits from
// block::encode's scales, element by element, then train::range_counts on x and its quantisation.
RangeCounts brute_block_counts(const block::BlockFormat& f, const RowMatrix& x) {
  const std::size_t shape[2] = {static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols())};
  const std::span<const float> in(x.data(), static_cast<std::size_t>(x.size()));
  const block::BlockTensor t = block::encode(f, in, shape);
  std::vector<float> q(in.size());
  block::quantize(f, in, q, shape);
  const block::BlockLayout& L = t.layout;
  std::vector<double> limit(in.size());
  for (std::size_t i = 0; i < limit.size(); ++i) {
    const std::size_t a = i / (L.rows * L.cols), r = (i / L.cols) % L.rows, c = i % L.cols;
    const std::size_t b = (a * L.grid_rows() + r / L.block_rows) * L.grid_cols() + c / L.block_cols;
    limit[i] =
        f.element.max_finite * block::scale_value(f, t.scales[b]) * static_cast<double>(t.tensor_scale);
  }
  return range_counts(x.data(), q.data(), q.size(), [&limit](std::size_t i) { return limit[i]; });
}

}  // namespace

TEST_CASE("range counts of every shipped block format equal a brute-force count, float and double",
          "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  const auto& blocks = block::BlockRegistry::builtin();
  for (const char* name :
       {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp4", "mxint8", "nvfp4", "nvfp4_tile16",
        "fp8_e4m3_per_tensor", "fp8_e4m3_tile128", "int8_per_channel", "int8_per_token"}) {
    CAPTURE(name);
    const block::BlockFormat& f = blocks.get(name);
    LinearPlan lp(test::read_plan(std::string("[roles]\ngrad_output = \"") + name + "\"\n"),
                  test::builtin_quantizers(), test::builtin_gemms(), c);
    std::mt19937 g(7);
    std::normal_distribution<float> d(0.0F, 1.0F);
    RowMatrix x(24, 160);  // partial blocks at each row's end (160 = 5·32 = 10·16; 160 % 128 = 32)
    for (Eigen::Index i = 0; i < x.size(); ++i)
      x.data()[i] = i % 13 == 0 ? 0.0F : d(g) * std::exp2(static_cast<float>(i % 7) * 6.0F - 30.0F);
    const RangeCounts want = brute_block_counts(f, x);
    RowMatrix q = x;
    RowMatrix b = RowMatrix::Ones(4, 160);
    quantize_operands(lp.site(0, "w1"), GemmPass::dgrad, 0, q, b);
    RangeCounts n = counts_of(lp, Role::grad_output);
    CHECK(n.elements == want.elements);
    CHECK(n.overflow == want.overflow);
    CHECK(n.underflow == want.underflow);
    // The same tensor in double (the quantiser rounds it to float first).
    lp.reset_counts();
    engine::RowMatrixD xd = x.cast<double>();
    engine::RowMatrixD bd = engine::RowMatrixD::Ones(4, 160);
    quantize_operands(lp.site(0, "w1"), GemmPass::dgrad, 0, xd, bd);
    n = counts_of(lp, Role::grad_output);
    CHECK(n.overflow == want.overflow);
    CHECK(n.underflow == want.underflow);
    // A NaN makes its block NaN (OCP MX) or is ignored: either way the general path counts it.
    lp.reset_counts();
    RowMatrix xn = x;
    xn(3, 5) = std::numeric_limits<float>::quiet_NaN();
    const RangeCounts want_nan = brute_block_counts(f, xn);
    quantize_operands(lp.site(0, "w1"), GemmPass::dgrad, 0, xn, b);
    n = counts_of(lp, Role::grad_output);
    CHECK(n.elements == want_nan.elements);
    CHECK(n.overflow == want_nan.overflow);
    CHECK(n.underflow == want_nan.underflow);
  }
  // Element formats: counted without a copy; limit the format's largest finite value.
  for (const char* name : {"bf16", "fp8_e4m3", "fp8_e5m2", "fp16"}) {
    CAPTURE(name);
    LinearPlan lp(test::read_plan(std::string("[roles]\ngrad_output = \"") + name + "\"\n"),
                  test::builtin_quantizers(), test::builtin_gemms(), c);
    std::mt19937 g(8);
    RowMatrix x = wide(g, 10, 48);
    RowMatrix q = x;
    RowMatrix b = RowMatrix::Ones(4, 48);
    quantize_operands(lp.site(0, "w2"), GemmPass::dgrad, 0, q, b);
    const format::Format& f = format::Registry::builtin().get(name);
    const RangeCounts want = range_counts(x.data(), q.data(), static_cast<std::size_t>(x.size()),
                                          [&f](std::size_t) { return f.max_finite; });
    const RangeCounts n = counts_of(lp, Role::grad_output);
    CHECK(n.elements == want.elements);
    CHECK(n.overflow == want.overflow);
    CHECK(n.underflow == want.underflow);
  }
}

TEST_CASE("set_counting(false) skips the counts and leaves the quantised values alone", "[train][unit]") {
  const engine::Config c = test::tiny_model("llama", "fp32", false).config;
  LinearPlan lp(test::read_plan("[roles]\ngrad_output = \"mxfp8_e5m2\"\n"), test::builtin_quantizers(),
                test::builtin_gemms(), c);
  std::mt19937 g(9);
  const RowMatrix x = wide(g, 8, 64);
  RowMatrix on = x, off = x;
  RowMatrix b = RowMatrix::Ones(4, 64);
  quantize_operands(lp.site(0, "w1"), GemmPass::dgrad, 0, on, b);
  CHECK(counts_of(lp, Role::grad_output).elements == static_cast<std::uint64_t>(x.size()));
  lp.set_counting(false);
  quantize_operands(lp.site(0, "w1"), GemmPass::dgrad, 0, off, b);
  CHECK(counts_of(lp, Role::grad_output).elements == static_cast<std::uint64_t>(x.size()));
  CHECK(test::same_bits(on, off));
}

namespace {

// Brute-force counts of element format `name` on `x`: finite |x| above the largest finite value, and
// non-zero x that the format's nearest-even rounding takes to zero.
RangeCounts element_brute(const char* name, const RowMatrix& x) {
  const format::Format& f = format::Registry::builtin().get(name);
  RangeCounts n;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const double v = static_cast<double>(x.data()[i]);
    if (!std::isfinite(v)) continue;
    ++n.elements;
    n.overflow += std::abs(v) > f.max_finite ? 1 : 0;
    n.underflow += v != 0 && format::quantize(f, v) == 0 ? 1 : 0;
  }
  return n;
}

RangeCounts sum(RangeCounts a, const RangeCounts& b) { return a += b; }

void check_counts(const RangeCounts& got, const RangeCounts& want) {
  CHECK(got.elements == want.elements);
  CHECK(got.overflow == want.overflow);
  CHECK(got.underflow == want.underflow);
}

}  // namespace

TEST_CASE("attention, activation and logits roles count their range like the linear roles", "[train][unit]") {
  const engine::Model m = test::tiny_model("llama", "fp32", false);
  const engine::Config& c = m.config;
  LinearPlan lp(test::read_plan("[roles]\nq = \"fp8_e4m3\"\nkv_cache = \"fp16\"\nscores = \"fp8_e5m2\"\n"
                                "probs = \"fp8_e4m3\"\nattn_output = \"fp8_e4m3\"\nmlp_hidden = \"fp16\"\n"
                                "residual = \"fp8_e4m3\"\nlogits = \"fp8_e5m2\"\n"),
                test::builtin_quantizers(), test::builtin_gemms(), c);
  CHECK(lp.quantised_roles() == std::vector<Role>{Role::q, Role::kv_cache, Role::scores, Role::probs,
                                                  Role::attn_output, Role::mlp_hidden, Role::residual,
                                                  Role::logits});
  std::mt19937 g(4);
  const RowMatrix q0 = wide(g, 6, 16), k0 = wide(g, 6, 8), v0 = wide(g, 6, 8), s0 = wide(g, 6, 6),
                  h0 = wide(g, 6, 24), r0 = wide(g, 6, 16), l0 = wide(g, 6, 40);
  RowMatrix q = q0, k = k0, v = v0, s = s0, h = h0, r = r0, l = l0;
  const BlockSite& b = lp.block(1);
  quantize_qkv(b, 0, q, k, v);
  quantize_scores(b, 0, 2, false, s);
  quantize_mlp_hidden(b, 0, h);
  quantize_residual(b, true, 0, r);
  quantize_logits(lp.logits(), 0, l, lp.counts());
  check_counts(counts_of(lp, Role::q), element_brute("fp8_e4m3", q0));
  check_counts(counts_of(lp, Role::kv_cache), sum(element_brute("fp16", k0), element_brute("fp16", v0)));
  check_counts(counts_of(lp, Role::scores), element_brute("fp8_e5m2", s0));
  check_counts(counts_of(lp, Role::mlp_hidden), element_brute("fp16", h0));
  check_counts(counts_of(lp, Role::residual), element_brute("fp8_e4m3", r0));
  check_counts(counts_of(lp, Role::logits), element_brute("fp8_e5m2", l0));
  CHECK(counts_of(lp, Role::q).overflow > 0);
  CHECK(counts_of(lp, Role::q).underflow > 0);
  // A training pass counts every role; without counting it counts nothing and gives the same bits.
  lp.reset_counts();
  std::vector<int> tokens(9);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int>(i * 7 % 40);
  const Params<float> p = params_from_model<float>(m);
  Params<float> g1, g2;
  const double loss = loss_and_gradients(c, p, tokens, 1, 8, g1, &lp);
  for (const RangeCounts& n : lp.range_counts()) CHECK(n.elements > 0);
  // Per block (4 query heads of 4, 2 KV heads): Q [8, 16] in the forward pass and again per head in
  // dK = dSᵀ·Q; K and V [8, 8] into the cache, then per query head in dQ = dS·K and dP = dO·Vᵀ.
  CHECK(counts_of(lp, Role::q).elements == 2 * (8 * 16 + 4 * 8 * 4));
  CHECK(counts_of(lp, Role::kv_cache).elements == 2 * (2 * 8 * 8 + 2 * 4 * 8 * 4));
  CHECK(counts_of(lp, Role::logits).elements == 8 * 40);
  lp.reset_counts();
  lp.set_counting(false);
  CHECK(loss_and_gradients(c, p, tokens, 1, 8, g2, &lp) == loss);
  for (const RangeCounts& n : lp.range_counts()) CHECK(n.elements == 0);
  g1.for_each([&](const std::string& name, const auto& t) {
    g2.for_each([&](const std::string& other, const auto& u) {
      if (name == other) CHECK(t == u);
    });
  });
}

TEST_CASE("the optimizer's roles count their range: state, update and master weights", "[train][unit]") {
  const engine::Model m = test::tiny_model("llama", "fp32", false);
  const auto plan = test::read_plan(
      "[roles]\noptimizer_state = \"fp16\"\nweight_update = \"fp8_e4m3\"\n"
      "master_weights = \"bf16\"\n");
  Params<float> p = params_from_model<float>(m);
  const Params<float> p0 = p;
  Params<float> grads = zeros_like(p);
  std::mt19937 gen(6);
  grads.for_each([&](const std::string&, auto& t) {
    const RowMatrix w = wide(gen, 1, static_cast<int>(t.size()));
    for (Eigen::Index i = 0; i < t.size(); ++i) t.data()[i] = w(0, i);
  });
  const Params<float> g0 = grads;
  OptimizerOptions o;
  o.kind = OptimizerKind::sgd;
  o.lr = 1e-3;
  Optimizer<float> opt(o, p, &plan, &test::builtin_quantizers(), m.config.n_layers);
  CHECK(opt.quantised_roles() ==
        std::vector<Role>{Role::master_weights, Role::optimizer_state, Role::weight_update});
  opt.step(p, grads, o.lr);
  // SGD's first step, by hand: b = fp16(g), u = fp8_e4m3(−lr·b), p = bf16(p + u), each counted once.
  RangeCounts state, update, master;
  const format::Format& fp16 = format::Registry::builtin().get("fp16");
  const format::Format& e4m3 = format::Registry::builtin().get("fp8_e4m3");
  std::vector<const float*> gs, ws;
  g0.for_each([&gs](const std::string&, const auto& t) { gs.push_back(t.data()); });
  p0.for_each([&ws](const std::string&, const auto& t) { ws.push_back(t.data()); });
  std::size_t k = 0;
  p.for_each([&](const std::string&, const auto& t) {
    const auto n = static_cast<int>(t.size());
    RowMatrix gb(1, n), u(1, n), w(1, n);
    for (int i = 0; i < n; ++i) {
      gb(0, i) = gs[k][i];
      const auto b = static_cast<float>(format::quantize(fp16, static_cast<double>(gs[k][i])));
      u(0, i) = -static_cast<float>(o.lr) * b;
      w(0, i) = ws[k][i] + static_cast<float>(format::quantize(e4m3, static_cast<double>(u(0, i))));
    }
    state += element_brute("fp16", gb);
    update += element_brute("fp8_e4m3", u);
    master += element_brute("bf16", w);
    ++k;
  });
  const std::vector<RangeCounts> got = opt.range_counts();
  check_counts(got[0], master);
  check_counts(got[1], state);
  check_counts(got[2], update);
  CHECK(got[1].overflow > 0);
  CHECK(got[2].underflow > 0);
  opt.reset_counts();
  CHECK(opt.range_counts()[1].elements == 0);
}
