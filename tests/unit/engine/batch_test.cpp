// Batched forward passes and batched sliding-window perplexity: running sequences together never
// changes a result. Each sequence's logits from Session::forward_batch must equal, bit for bit,
// those of `reset(); forward(sequence)` under plans whose quantisation depends on all rows of a
// tensor (per-tensor scales, NVFP4's tensor scale), on positions (stochastic rounding streams,
// RoPE, learned positions), on routing (mixture of experts) and on datapath GEMMs.
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"
#include "lpemu/engine/session.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/metrics/perplexity.hpp"
#include "support/tiny_model.hpp"

namespace {

using namespace lpemu::engine;

bool same_bits(const RowMatrix& a, const RowMatrix& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(float)) == 0;
}

const QuantizerFactory& quantizers() {
  static const QuantizerFactory q = QuantizerFactory::standard(lpemu::format::Registry::builtin());
  return q;
}

PrecisionPlan plan(const std::string& toml) {
  return parse_plan_toml("name = \"p\"\n" + toml, "batch.toml", quantizers(), GemmFactory::builtin());
}

// Plans under which each row's result depends on other rows or on positions unless each sequence
// of a batch is quantised, encoded and positioned on its own.
std::vector<std::string> plans() {
  const auto fp8_everywhere = [](const std::string& kv) {
    return "[defaults]\nrounding = \"stochastic\"\nseed = 7\n[roles]\nweights = \"fp8_e4m3\"\n"
           "linear_input = \"fp8_e4m3\"\nq = \"fp8_e4m3\"\nk = \"fp8_e4m3\"\nv = \"fp8_e4m3\"\n"
           "kv_cache = \"" +
           kv +
           "\"\nscores = \"bf16\"\nprobs = \"fp8_e4m3\"\nattn_output = \"fp8_e4m3\"\n"
           "mlp_hidden = \"fp8_e4m3\"\nresidual = \"bf16\"\nlm_head = \"fp8_e4m3\"\n"
           "lm_head_input = \"fp8_e4m3\"\nlogits = \"bf16\"\n";
  };
  return {
      "",                      // fp32
      "compute = \"fp64\"\n",  // double
      fp8_everywhere("fp8_e5m2"),
      fp8_everywhere("fp8_e4m3") + "gemm = \"h100_e4m3_fp32\"\nattention_gemm = \"h100_e4m3_fp32\"\n",
      "[roles]\nweights = \"fp8_e4m3_per_tensor\"\nlinear_input = \"fp8_e4m3_per_tensor\"\n",
      "[roles]\nweights = \"nvfp4\"\nlinear_input = \"nvfp4\"\nlm_head = \"nvfp4\"\nlm_head_input = "
      "\"nvfp4\"\n",
      "[roles]\nweights = \"nvfp4\"\nlinear_input = \"nvfp4\"\ngemm = \"b200_nvfp4_fp32\"\n"
      "[[override]]\nkind = \"head\"\ngemm = \"none\"\n",
      "[roles]\nweights = \"mxfp8_e4m3\"\nlinear_input = \"mxfp8_e4m3\"\ngemm = \"b200_mxfp8_fp32\"\n"
      "[[override]]\nkind = \"head\"\ngemm = \"none\"\n",
      "[roles]\nweights = \"int8_per_token\"\nlinear_input = \"int8_per_token\"\n",
      "[roles]\ngemm = { datapath = \"h100_e4m3_fp32\", convert = true }\n",
  };
}

std::vector<std::vector<int>> sequences(int vocab) {
  std::mt19937 g(5);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  std::vector<std::vector<int>> s;
  for (const int n : {7, 1, 0, 12, 3}) {
    std::vector<int> t(static_cast<std::size_t>(n));
    for (int& x : t) x = tok(g);
    s.push_back(t);
  }
  return s;
}

}  // namespace

TEST_CASE("a batch of sequences gives each sequence's logits of a run on its own, bit for bit",
          "[engine][unit][batch]") {
  for (const char* family : {"llama", "gpt2", "mixtral"}) {
    const Model m = lpemu::test::tiny_model(family, "fp32", false);
    const auto seqs = sequences(m.config.vocab_size);
    std::vector<std::span<const int>> spans(seqs.begin(), seqs.end());
    for (const std::string& text : plans()) {
      INFO(family << " under\n" << text);
      SessionOptions o;
      o.quantizers = &quantizers();
      std::size_t hooked = 0;
      o.on_quant = [&](const QuantPoint&, const RowMatrix&, const RowMatrix&) { ++hooked; };
      Session s(m, plan(text), o);
      // A decode step first: the batch must not depend on (nor disturb) what the cache held.
      (void)s.forward(std::span<const int>(seqs[0].data(), 2));
      RowMatrix batch;
      s.forward_batch(spans, batch);
      CHECK(s.position() == 0);
      REQUIRE(batch.rows() == 23);
      Eigen::Index row = 0;
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        INFO("sequence " << i << " of " << seqs[i].size() << " tokens");
        s.reset();
        const RowMatrix alone = s.forward(seqs[i]);
        const auto n = static_cast<Eigen::Index>(seqs[i].size());
        if (n > 0) CHECK(same_bits(batch.middleRows(row, n), alone));
        row += n;
      }
      if (!text.empty() && text.find("fp64") == std::string::npos) CHECK(hooked > 0);
    }
  }
}

TEST_CASE("a batched sequence longer than the cache is refused like an unbatched one",
          "[engine][unit][batch]") {
  const Model m = lpemu::test::tiny_model("llama", "fp32", false);
  SessionOptions o;
  o.max_tokens = 4;
  Session s(m, plan(""), o);
  const std::vector<int> a{1, 2, 3}, b{1, 2, 3, 4, 5};
  const std::vector<std::span<const int>> spans{a, b};
  RowMatrix logits;
  CHECK_THROWS_AS(s.forward_batch(spans, logits), lpemu::ShapeError);
  s.forward_batch(std::vector<std::span<const int>>{a, a}, logits);
  CHECK(logits.rows() == 6);
  CHECK(same_bits(logits.topRows(3), logits.bottomRows(3)));
}

TEST_CASE("sliding-window perplexity of several documents does not depend on the batch size",
          "[engine][unit][batch][perplexity]") {
  const Model m = lpemu::test::tiny_model("gpt2", "fp32", false);
  std::mt19937 g(9);
  std::uniform_int_distribution<int> tok(0, m.config.vocab_size - 1);
  std::vector<std::vector<int>> docs;
  for (const int n : {70, 2, 33, 128}) {  // up to 4× the context of 32
    std::vector<int> t(static_cast<std::size_t>(n));
    for (int& x : t) x = tok(g);
    docs.push_back(t);
  }
  const PrecisionPlan p = plan(plans()[2]);  // fp8 with stochastic rounding everywhere
  const auto gemms = GemmFactory::builtin();
  for (const int stride : {32, 7}) {
    lpemu::metrics::PerplexityOptions po;
    po.stride = stride;
    std::vector<std::vector<lpemu::metrics::PerplexityResult>> runs;
    for (const int batch : {1, 40, 100000}) {
      po.batch_tokens = batch;
      SessionOptions o;
      o.quantizers = &quantizers();
      o.max_tokens = lpemu::metrics::perplexity_cache_tokens(m, docs, po);
      Session s(m, p, o);
      std::size_t calls = 0;
      po.progress = [&](std::size_t done, std::size_t total, double) {
        ++calls;
        CHECK(done <= total);
      };
      runs.push_back(lpemu::metrics::sliding_perplexity(s, docs, po));
      CHECK(calls >= 1);
      std::size_t windows = 0;
      for (const auto& r : runs.back()) windows += static_cast<std::size_t>(r.windows);
      if (batch == 1) CHECK(calls == windows);  // one window per batch
    }
    for (std::size_t d = 0; d < docs.size(); ++d) {
      INFO("stride " << stride << ", document " << d);
      // Each document on its own (its own session) gives the same numbers too.
      po.batch_tokens = 512;
      po.progress = {};
      const auto own = lpemu::metrics::sliding_perplexity(m, p, docs[d], quantizers(), gemms, po);
      // Every token but the first is scored, except a window's first token that no earlier window
      // reached (stride = context), as in the recipe.
      CHECK(own.nll.size() == docs[d].size() - 1 - (stride == 32 ? own.windows - 1 : 0));
      for (const auto& r : runs) {
        CHECK(r[d].windows == own.windows);
        REQUIRE(r[d].nll.size() == own.nll.size());
        CHECK(std::memcmp(r[d].nll.data(), own.nll.data(), own.nll.size() * sizeof(double)) == 0);
      }
    }
  }
}
