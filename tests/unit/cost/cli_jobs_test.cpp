// `lpemu cost` end to end for the settings real jobs use and the plans and targets that used to be
// refused: every shipped plan on B200, fp32 operands on a TPU, uneven pipeline stages, warnings.
#include <string>

#include <catch2/catch.hpp>

#include "support/test_support.hpp"

namespace {

using lpemu::test::Run;

// `lpemu ARGS` with stderr merged into Run::out.
Run run(const std::string& args) { return lpemu::test::run_lpemu_merged(args); }

TEST_CASE("lpemu cost prices NVFP4 plans and fp32-leaving plans on B200", "[cost][cli]") {
  for (const char* plan : {"--plan nvfp4", "--plan nvfp4_b200", "--plan bf16 --weights mxfp4"}) {
    INFO(plan);
    const auto r = run(std::string("cost --target b200 --model llama2_70b ") + plan);
    CHECK(r.status == 0);
    CHECK_THAT(r.out, Catch::Contains("decode (batch 1, context 2048)"));
  }
  // nvfp4 leaves attention in fp32: B200's datasheet FP32 rate runs it, natively (no note).
  const auto r = run("cost --target b200 --model llama2_70b --plan nvfp4 --phase prefill --top 20");
  CHECK_THAT(r.out, Catch::Contains("attn.sdpa") && Catch::Contains("fp32 x fp32 on generic_fp32"));
  CHECK_THAT(r.out, !Catch::Contains("note:"));
}

TEST_CASE("lpemu cost says how fp32 operands run on a target without an fp32 class", "[cost][cli]") {
  const auto r = run("cost --target tpu_v5e --model llama2_7b --plan nvfp4 --phase prefill");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("note: fp32 x fp32: no tpu_v5e rate class accepts both; run as 6 bf16 "
                                    "passes per MAC (split operands: bf16x3/x6, Henry et al. ARITH 2019)"));
  const auto j = run("cost --target tpu_v5e --model llama2_7b --plan nvfp4 --phase prefill --json");
  CHECK_THAT(j.out,
             Catch::Contains("\"passes\":6.0") && Catch::Contains("\"notes\":[\"fp32 x fp32: no tpu_v5e"));
  // fp64 fits nowhere: the error names the layer and the op (exit 2).
  const auto e = run("cost --target h100_sxm --model llama2_7b --plan fp64");
  CHECK(e.status == 2);
  CHECK_THAT(e.out,
             Catch::Contains("layer 0 attn.q_proj (fp64 x fp64): target 'h100_sxm' has no rate class"));
}

TEST_CASE("lpemu cost trains 126 layers on pp=16 and warns about ill-posed degrees", "[cost][cli][cluster]") {
  const auto r =
      run("cost --system dgx_h100 --model llama3_405b --phase train --devices 1024 --parallel tp=8,pp=16 "
          "--context 8192 --global-batch 128");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("parallel tp=8,pp=16,dp=8,zero=1"));
  const auto w =
      run("cost --system dgx_h100 --model llama3_8b --phase train --devices 16 --parallel tp=16,cp=1 "
          "--context 4096 --global-batch 16 --attention unfused --dp-overlap off --grad-comm fp32 --act-comm "
          "bf16");
  CHECK(w.status == 0);
  CHECK_THAT(w.out,
             Catch::Contains("warning  tp = 16 is wider than system 'dgx_h100''s scale-up domain of 8"));
  CHECK_THAT(w.out, Catch::Contains("on the wire: gradients fp32, activations bf16"));
  const auto bad =
      run("cost --system dgx_h100 --model llama3_8b --phase train --devices 512 --parallel tp=8,pp=64");
  CHECK(bad.status == 2);
  CHECK_THAT(bad.out, Catch::Contains("pp = 64, n_layers = 32: expected 1 <= pp <= n_layers"));
}

}  // namespace
