// Library-level regression tests for classes of bad input that used to give a silent wrong result
// or a crash: NaN through every error measure, impossible model hyper-parameters, parallel degrees
// whose product overflows, runaway datapath-error sizes, and tokenizer ids/scores/offsets.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "lpemu/cost/parallel.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/engine/bpe_tokenizer.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/engine/tokenizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/datapath_error.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/io/hdf5.hpp"
#include "lpemu/metrics/metrics.hpp"
#include "support/test_support.hpp"

namespace {

using namespace lpemu;
using Catch::Matchers::Contains;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST_CASE("NaN propagates through max_nan, compare and kl_divergence", "[metrics][unit][regression]") {
  CHECK(std::isnan(metrics::max_nan(0.0, std::nan(""))));
  CHECK(std::isnan(metrics::max_nan(std::nan(""), 1.0)));
  CHECK(metrics::max_nan(1.0, 2.0) == 2.0);
  CHECK(std::isnan(std::max(0.0, std::nan(""))) == false);  // why max_nan exists
  // A NaN anywhere in either operand: the largest error is unknown, never 0.
  const std::vector<float> ref{1, 2, 3, 4};
  for (std::size_t i = 0; i < ref.size(); ++i) {
    std::vector<float> test = ref;
    test[i] = kNaN;
    const metrics::ErrorStats s = metrics::compare(ref, test);
    CHECK(std::isnan(s.max_abs));
    CHECK(std::isnan(s.mse));
    CHECK(std::isnan(s.sqnr_db));
    const metrics::ErrorStats r = metrics::compare(test, ref);
    CHECK(std::isnan(r.max_abs));
  }
  // +Inf against +Inf (an Inf weight in both the reference and the emulated product): not comparable.
  const std::vector<float> inf{1, kInf};
  CHECK(std::isnan(metrics::compare(inf, inf).max_abs));
  CHECK(std::isnan(metrics::compare(inf, inf).sqnr_db));
  // Equal finite data still compares as equal.
  CHECK(metrics::compare(ref, ref).max_abs == 0.0);
  CHECK(std::isinf(metrics::compare(ref, ref).sqnr_db));
  const std::vector<float> logits{0.5F, 1.0F, kNaN};
  CHECK(std::isnan(metrics::kl_divergence(ref, std::vector<float>{1, 2, 3, kNaN})));
  CHECK(std::isnan(metrics::nll(logits, 0)));
}

engine::Config good_config() {
  engine::Config c;
  c.name = "t";
  c.dim = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  c.hidden_dim = 16;
  c.vocab_size = 32;
  c.seq_len = 16;
  return c;
}

TEST_CASE("check_config refuses impossible hyper-parameters by name", "[engine][unit][regression]") {
  REQUIRE_NOTHROW(engine::check_config(good_config(), "m.h5"));
  struct Case {
    void (*edit)(engine::Config&);
    const char* says;
  };
  const double nan = std::nan("");
  for (const double v : {nan, -1e-5, double(kInf)}) {
    engine::Config c = good_config();
    c.norm_eps = v;
    CHECK_THROWS_WITH(engine::check_config(c, "m.h5"),
                      Contains("m.h5: norm_eps = ") && Contains("expected a finite number >= 0"));
  }
  for (const double v : {nan, 0.0, -10000.0, double(kInf)}) {
    engine::Config c = good_config();
    c.rope_theta = v;
    CHECK_THROWS_WITH(engine::check_config(c, "m.h5"), Contains("rope_theta = ") && Contains("> 0"));
    c.positions = engine::PositionKind::learned;  // learned positions never read rope_theta
    CHECK_NOTHROW(engine::check_config(c, "m.h5"));
  }
  for (const Case k : {
           Case{[](engine::Config& c) { c.rope_scaling = "llama3", c.rope_factor = 0; }, "rope_factor = 0"},
           Case{[](engine::Config& c) { c.rope_scaling = "llama3", c.rope_factor = std::nan(""); },
                "rope_factor = nan"},
           Case{[](engine::Config& c) { c.rope_scaling = "llama3", c.rope_low_freq_factor = 0; },
                "rope_low_freq_factor = 0"},
           Case{[](engine::Config& c) { c.rope_scaling = "llama3", c.rope_high_freq_factor = 1; },
                "rope_high_freq_factor = 1: expected a finite number > rope_low_freq_factor = 1"},
           Case{[](engine::Config& c) { c.head_dim = 7, c.n_heads = 1, c.n_kv_heads = 1; }, "head_dim = 7"},
           Case{[](engine::Config& c) { c.bos_id = -3; }, "bos_id = -3: expected a token id in 0..31"},
           Case{[](engine::Config& c) { c.eos_id = 32; }, "eos_id = 32"},
           Case{[](engine::Config& c) { c.n_kv_heads = 3; }, "n_kv_heads = 3"},
           Case{[](engine::Config& c) { c.dim = 0; }, "dim = 0: expected a positive integer"},
           Case{[](engine::Config& c) { c.n_experts = 2, c.n_experts_per_token = 3; },
                "n_experts_per_token = 3"},
       }) {
    engine::Config c = good_config();
    k.edit(c);
    INFO(k.says);
    CHECK_THROWS_WITH(engine::check_config(c, "m.h5"), Contains(k.says));
  }
}

TEST_CASE("parallel degrees are range-checked before they are multiplied", "[cost][unit][regression]") {
  // 2^32 x 2^32 wrapped to 0 devices and divided by it (SIGFPE).
  CHECK_THROWS_WITH(cost::parse_parallel("tp=4294967296,pp=4294967296", 8),
                    Contains("tp = 4294967296: expected at most 1048576"));
  CHECK_THROWS_WITH(cost::parse_parallel("tp=1024,pp=1024,dp=1024"),
                    Contains("tp x pp x dp x cp = 1073741824 devices"));
  CHECK_THROWS_WITH(cost::parse_parallel("tp=8", 1LL << 40),
                    Contains("--devices 1099511627776: expected at most"));
  CHECK_THROWS_AS(cost::parse_parallel("tp=99999999999999999999999"), SpecError);
  const cost::Parallel p = cost::parse_parallel("tp=1024,pp=1024");
  CHECK(p.devices() == 1LL << 20);
}

TEST_CASE("datapath_error refuses runaway sizes with the limit named", "[experiment][unit][regression]") {
  experiment::DatapathErrorConfig c;
  datapath::Datapath d = datapath::DatapathRegistry::builtin().get("ideal");
  d.a = d.b = format::Registry::builtin().get("fp8_e4m3");
  c.datapaths = {d};
  c.ks = {300000000};
  CHECK_THROWS_WITH(experiment::datapath_error(c),
                    Contains("k = 300000000: expected an integer in 1..1048576"));
  c.ks = {0};
  CHECK_THROWS_WITH(experiment::datapath_error(c), Contains("k = 0"));
  c.ks = {};
  CHECK_THROWS_WITH(experiment::datapath_error(c), Contains("k is empty"));
  c.ks = {16};
  c.trials = 2000000;
  CHECK_THROWS_WITH(experiment::datapath_error(c),
                    Contains("trials = 2000000: expected an integer in 1..1000000"));
  c.ks = {1048576};
  c.trials = 1000;
  CHECK_THROWS_WITH(experiment::datapath_error(c), Contains("trials x sum of k = 1000 x 1048576"));
}

std::string bpe_json(const std::string& vocab, const std::string& added) {
  return R"({"model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []}, "added_tokens": )" + added +
         "}";
}

TEST_CASE("tokenizer ids, scores and byte offsets are checked", "[engine][unit][regression]") {
  const std::string vocab = R"({"a": 0, "b": 1})";
  CHECK_NOTHROW(engine::BpeTokenizer::parse(bpe_json(vocab, R"([{"id": 2, "content": "<s>"}])"), "t.json"));
  // id -1 used to index pieces[-1]; 5e7 allocated 1.6 GB of empty pieces; 2^32 + 1 wrapped onto 1.
  // Sparse ids below the bound are fine (the unit tests' extracts of published vocabularies).
  for (const char* id : {"-1", "50000000", "4294967297", "1.5", "\"2\""}) {
    INFO(id);
    CHECK_THROWS_WITH(
        engine::BpeTokenizer::parse(
            bpe_json(vocab, std::string(R"([{"id": )") + id + R"(, "content": "<s>"}])"), "t.json"),
        Contains("t.json: added_tokens[].id = ") && Contains("expected a token id in 0..2097151"));
  }
  CHECK_THROWS_WITH(engine::BpeTokenizer::parse(bpe_json(R"({"a": 0, "b": 3000000})", "[]"), "t.json"),
                    Contains("model.vocab.b = 3000000: expected a token id in 0..2097151"));
  std::vector<std::string> pieces(300, "x");
  std::vector<float> scores(300, 0.0F);
  CHECK_NOTHROW(engine::Tokenizer(pieces, scores, 1, 2, 3));
  CHECK_THROWS_WITH(engine::Tokenizer(pieces, scores, 1, 2, -1), Contains("byte_fallback_offset = -1"));
  CHECK_THROWS_WITH(engine::Tokenizer(pieces, scores, 1, 2, 45),
                    Contains("byte_fallback_offset = 45: expected an integer in 0..44"));
  scores[7] = kNaN;
  CHECK_THROWS_WITH(engine::Tokenizer(pieces, scores, 1, 2, 3),
                    Contains("scores[7] = nan: expected a finite merge score"));
}

TEST_CASE("a model file's attributes are range-checked, never truncated or read as their first element",
          "[engine][unit][regression]") {
  // Seeds of the model_h5 fuzz target: a tiny model with the shipped model's SentencePiece
  // tokenizer, and copies of the tiny models with one attribute rewritten.
  const auto seed = [](const std::string& name) {
    return lpemu::test::source_path("tests/fuzz/corpus/model_h5/" + name);
  };
  const engine::Model m = engine::load_model(seed("tiny_llama_sentencepiece.h5"));
  CHECK(m.config.dim == 8);
  CHECK(m.tokenizer.size() == 512);
  // 2^40 used to be cast to int (0): a tokenizer whose byte pieces were the wrong ones.
  CHECK_THROWS_WITH(engine::load_model(seed("attr_byte_fallback_offset_2pow40.h5")),
                    Contains("tokenizer attribute 'byte_fallback_offset' = 1099511627776: expected an "
                             "integer in 0..2147483647"));
  CHECK_THROWS_WITH(engine::load_model(seed("attr_byte_fallback_offset_string.h5")),
                    Contains("attribute 'byte_fallback_offset' is not an integer"));
  CHECK_THROWS_WITH(engine::load_model(seed("attr_dim_2pow40.h5")),
                    Contains("root attribute 'dim' = 1099511627776: expected an integer in 0..2147483647"));
  CHECK_THROWS_WITH(engine::load_model(seed("attr_dim_array2.h5")),
                    Contains("attribute 'dim' holds 2 values: expected one"));
  CHECK_THROWS_WITH(engine::load_model(seed("attr_dim_null_space.h5")),
                    Contains("attribute 'dim' holds 0 values: expected one"));
  CHECK_THROWS_WITH(engine::load_model(seed("attr_dim_double.h5")),
                    Contains("attribute 'dim' is not an integer"));
  CHECK_THROWS_WITH(engine::load_model(seed("attr_family_int.h5")),
                    Contains("attribute 'family' is not a string"));
  CHECK_THROWS_WITH(engine::load_model(seed("attr_n_heads_missing.h5")),
                    Contains("root attribute 'n_heads' is missing"));
  // A flipped byte of the 'dim' attribute's datatype: bit offset 65280 in an 8-byte integer, which
  // libhdf5 converted by, reading 8 KB past the value (garbage, or SIGSEGV in H5T__bit_find).
  CHECK_THROWS_WITH(engine::load_model(seed("flip_1145_dim_bit_offset.h5")),
                    Contains("attribute 'dim' has an impossible integer type (8 bytes, bit offset 65280, "
                             "precision 64) (corrupt file?)"));
  // A group's symbol table message naming its B-tree at address 2^64 - 1 (a fuzzer finding):
  // libhdf5 read the node from a null buffer (SIGSEGV in the command).
  CHECK_THROWS_WITH(engine::load_model(lpemu::test::source_path(
                        "tests/fuzz/findings/model_h5/group_btree_address_undefined.h5")),
                    Contains("symbol table message: no TREE at its address (corrupt file?)"));
  // A model asking for a billion-row embedding is refused by the stored shape, before allocation.
  CHECK_THROWS_WITH(engine::load_model(seed("attr_vocab_size_1e9.h5")),
                    Contains("dataset 'tok_embeddings' has shape [16, 8], expected [1000000000, 8]"));
}

TEST_CASE("libhdf5 prints no error stack, on any thread", "[io][unit][regression]") {
  // libhdf5 is thread-safe in Debian, so its automatic error printing is a per-thread setting: a
  // model's datasets are read on worker threads, where a corrupt dataset (here the object header
  // of layers/0/attention/wq, version 7) printed libhdf5's error stack to stderr.
  const std::string seed =
      lpemu::test::source_path("tests/fuzz/corpus/model_h5/dataset_wq_object_header_version_7.h5");
  const lpemu::test::Scratch scratch("hdf5_quiet");
  const std::string log = (scratch / "stderr.txt").string();
  const io::H5File f = io::H5File::open(seed);
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);  // NOLINT
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  std::string error;
  std::thread reader([&] {
    try {
      (void)f.read_floats("layers/0/attention/wq");
    } catch (const Error& e) {
      error = e.what();
    }
  });
  reader.join();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(fd);
  ::close(saved);
  std::ifstream in(log);
  std::stringstream printed;
  printed << in.rdbuf();
  CHECK(printed.str().empty());
  CHECK_THAT(error, Contains("layers/0/attention/wq"));
}

}  // namespace
