// `eval` of several documents runs their windows together in batches of up to batch_tokens
// tokens (one prefill over several sequences, each with its own KV cache, causal mask and
// quantisation scopes). The reference: the same documents with one window per forward pass, and
// each document evaluated on its own; every negative log-likelihood must agree bit for bit, under
// the fp32 plan, a bit-exact datapath plan, an MX block plan and a per-tensor-scaled plan.
#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/app/evaluate.hpp"
#include "lpemu/experiment/context.hpp"
#include "support/test_support.hpp"

namespace {

using lpemu::app::DocumentScore;
using lpemu::app::EvalReport;
using lpemu::app::EvalRequest;

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// Every score of `a` and `b` (plan and reference) the same, bit for bit.
void check_same(const DocumentScore& a, const DocumentScore& b) {
  CHECK(a.tokens == b.tokens);
  using Side = lpemu::metrics::PerplexityResult DocumentScore::*;
  for (const Side side : {&DocumentScore::plan, &DocumentScore::reference}) {
    const auto& x = a.*side;
    const auto& y = b.*side;
    CHECK(x.windows == y.windows);
    REQUIRE(x.nll.size() == y.nll.size());
    for (std::size_t t = 0; t < x.nll.size(); ++t) {
      INFO("token " << t);
      CHECK(lpemu::test::same_bits_or_nan(x.nll[t], y.nll[t]));
    }
    CHECK(lpemu::test::same_bits_or_nan(x.mean_nll, y.mean_nll));
  }
}

}  // namespace

TEST_CASE("eval of several documents gives each document's scores alone, however its windows are batched",
          "[engine][unit][batch][eval]") {
  lpemu::experiment::Context ctx;
  ctx.data_dirs = lpemu::experiment::data_search_dirs({lpemu::test::source_path(".")});
  const lpemu::test::Scratch dir("batch_eval");
  const std::string paragraph =
      lpemu::test::slurp(lpemu::test::source_path("data/models/stories260K/paragraph.txt"));
  REQUIRE(paragraph.size() > 600);
  const std::vector<std::filesystem::path> texts{dir / "a.txt", dir / "b.txt", dir / "c.txt"};
  write_text(texts[0], paragraph);
  write_text(texts[1], paragraph.substr(0, 120));
  write_text(texts[2], paragraph.substr(300, 300));
  write_text(dir / "per_tensor.toml",
             "name = \"per_tensor\"\n[roles]\nweights = \"fp8_e4m3_per_tensor\"\n"
             "linear_input = \"fp8_e4m3_per_tensor\"\n");
  for (const std::string& plan : {std::string("fp32"), std::string("h100_e4m3"), std::string("mxfp8"),
                                  (dir / "per_tensor.toml").string()}) {
    INFO("plan " << plan);
    EvalRequest req;
    req.model = "stories260K";
    req.plan = plan;
    req.reference = "fp32";
    req.texts = texts;
    req.context = 48;
    req.stride = 32;
    req.batch_tokens = 100000;  // every window of the three documents in one forward pass
    const EvalReport all = lpemu::app::evaluate(ctx, req);
    req.batch_tokens = 1;  // one window per forward pass
    const EvalReport one = lpemu::app::evaluate(ctx, req);
    REQUIRE(all.documents.size() == texts.size());
    REQUIRE(one.documents.size() == texts.size());
    CHECK(all.documents[0].plan.windows > 1);
    for (std::size_t d = 0; d < texts.size(); ++d) {
      INFO("document " << d);
      check_same(all.documents[d], one.documents[d]);
      req.texts = {texts[d]};
      req.batch_tokens = 512;
      const EvalReport alone = lpemu::app::evaluate(ctx, req);
      REQUIRE(alone.documents.size() == 1);
      check_same(all.documents[d], alone.documents[0]);
      req.texts = texts;
    }
    if (plan == "fp32") {
      for (const DocumentScore& d : all.documents) CHECK(d.plan.nll == d.reference.nll);
    } else {
      CHECK(all.documents[0].plan.nll != all.documents[0].reference.nll);  // the plan quantises
    }
  }
}
