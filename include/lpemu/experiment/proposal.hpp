// Format proposals for hardware vendors: a self-contained directory with the encoding
// spec, conversion test vectors whose expected codes come from lpemu's exact conversion, packed
// block vectors for block formats, dot-product vectors for a datapath, the accuracy and cost on a
// model against bf16 and mxfp8 baselines, a SHA-256 MANIFEST, and a verifier for a vendor's results.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lpemu/block/block_format.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/experiment/experiment.hpp"
#include "lpemu/format/format.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::experiment {

struct Toolbox;
class Context;

/// One conversion test vector: an input (float32 or bf16 bits) and the expected code.
struct ConversionVector {
  std::uint64_t row = 0;
  std::uint32_t input_bits = 0;  ///< float32 bits, or bf16 bits right-aligned
  double input_value = 0;
  format::RoundingMode rounding = format::RoundingMode::nearest_even;
  format::Overflow overflow = format::Overflow::native;
  int sr_bits = 0;           ///< stochastic rows only
  std::uint32_t random = 0;  ///< stochastic rows only: the r random bits used
  std::uint64_t expected_code = 0;
  double expected_value = 0;
};

/// The inputs that exercise every boundary of `f`: each value, each midpoint and their float32
/// neighbours, overflow and underflow edges, NaN, ±Inf, ±0, plus a seeded random sample.
std::vector<float> boundary_inputs(const format::Format& f, std::uint64_t seed);

/// Conversion vectors from float32 (`bf16_inputs` false) or bf16 inputs into `f`, for every
/// rounding mode and overflow policy (stochastic rows carry their random bits).
std::vector<ConversionVector> conversion_vectors(const format::Format& f, bool bf16_inputs,
                                                 std::uint64_t seed);

/// One block test vector: a small tensor (one or more blocks) of float32 inputs, and what the
/// block format makes of it: scale codes, packed element bytes and decoded values.
struct BlockVector {
  std::uint64_t row = 0;
  std::string name;                   ///< the edge case it exercises
  std::vector<std::size_t> shape;     ///< tensor shape (blocks along the last axis)
  std::vector<float> inputs;          ///< row-major
  float tensor_scale = 1.0F;          ///< FP32 second-level scale (1 when the format has none)
  std::vector<std::uint32_t> scales;  ///< scale codes in block order
  std::vector<std::uint8_t> packed;   ///< element codes packed (block/pack.hpp layout)
  std::vector<float> decoded;         ///< decode(scales, packed), row-major
};

/// Block vectors for `f`: every element value, ties, zero blocks, NaN/Inf inside a block, scale
/// overflow and underflow, float32 subnormals, outliers, multi-block tensors and a random sample.
/// Blocked formats are cut along the last axis (the format's axis is set to -1).
std::vector<BlockVector> block_vectors(const block::BlockFormat& f, std::uint64_t seed);

/// One dot-product test vector: d = c + Σ a_i·b_i on a datapath, inputs and output as codes.
struct DotVector {
  std::uint64_t row = 0;
  std::string name;                 ///< what it exercises (alignment, truncation, ...)
  std::vector<std::uint64_t> a, b;  ///< codes of the datapath's a and b formats
  std::uint64_t c = 0;              ///< code of the output format
  std::vector<std::int32_t> scale_a,
      scale_b;                 ///< power-of-two block scale exponents (block-scaled datapaths)
  std::uint64_t expected = 0;  ///< result code in the output format
  std::string exact;           ///< the exact c + Σ a_i·b_i, in decimal
};

/// Dot-product vectors for `dp`: alignment at and around the quantum, truncation of signed terms,
/// cancellation, the fused-term and promotion boundaries, subnormals, the addend, specials,
/// overflow, block scales and a random sample. Row r uses stochastic-rounding stream index r.
std::vector<DotVector> dot_vectors(const datapath::Datapath& dp, std::uint64_t seed);

/// `dp` with both inputs replaced by `element` (a proposal's format on an existing adder).
datapath::Datapath retarget_datapath(const datapath::Datapath& dp, const format::Format& element);

/// The datapath file of `dp` (a retarget_datapath result of the record read from `origin`):
/// datapath::to_toml(dp) under a comment naming `origin`, so that lpemu reads it back as `dp`.
/// `text` (the original file) is no longer needed: the record carries every field.
std::string retarget_datapath_toml(std::string_view text, std::string_view origin,
                                   const datapath::Datapath& dp);

/// Accuracy and cost of a proposal on a model (summary.md): the sweep machinery runs fp32, bf16,
/// mxfp8_e4m3 and each proposed format (and each on the datapath, if any) on the linear layers'
/// weights and inputs (overflow saturating), priced by the cost model.
struct AccuracyRequest {
  std::vector<std::string> formats;  ///< proposed format names the tools know (e.g. e3m3, e3m3_per_tensor)
  std::string gemm;                  ///< datapath GEMM the tools know ("" : none)
  std::string model;                 ///< model name or path
  std::filesystem::path text;        ///< text to score
  CostSetup cost;                    ///< where plans are priced (target empty: no cost)
  const Toolbox* tools = nullptr;    ///< must know the proposed format (and datapath)
  int max_tokens = 0;                ///< score at most this many tokens (0: all)
  std::function<void(const std::string&)> on_progress;  ///< one line per finished plan
};

/// What a proposal is written from.
struct ProposalRequest {
  format::Format format;                       ///< the element format (a block format's element)
  std::optional<block::BlockFormat> block;     ///< set for a block-format proposal
  std::string format_toml;                     ///< the spec file's text, copied into the package
  std::string element_toml;                    ///< block proposals: the element format's TOML
  std::optional<datapath::Datapath> datapath;  ///< the datapath the format is proposed with
  std::string datapath_toml;                   ///< its TOML text (as given, or rewritten for new inputs)
  std::optional<AccuracyRequest> accuracy;     ///< --model: summary.md
  std::filesystem::path out;
  bool force = false;      ///< replace files of an existing package
  std::uint64_t seed = 1;  ///< random sample of the vectors
};

/// The formats and datapath of a proposal, with the TOML texts the package copies: `format_name`
/// is an element or block format name or a .toml file, `datapath_name` a datapath name, a .toml file or ""
/// (the datapath's inputs are replaced by the proposed element format). With `register_new`, a
/// format or datapath read from a file (or retargeted) is added to ctx so a model run finds it by
/// name. Throws UnknownNameError (with the closest names) or SpecError.
ProposalRequest proposal_request(Context& ctx, const std::string& format_name,
                                 const std::string& datapath_name, bool register_new);

/// The formats the accuracy run of `req` compares: the block format, or the element format alone
/// and with one FP32 scale per tensor (added to ctx as "<name>_per_tensor" when missing).
std::vector<std::string> proposal_accuracy_formats(Context& ctx, const ProposalRequest& req);

/// Writes the package (spec.md, format.toml, conversion_float32.csv, conversion_bf16.csv, and
/// blocks.csv, dot.csv, datapath.toml, summary.md + accuracy/ as requested, then MANIFEST) and
/// returns the files written. Refuses a non-empty `out` unless `force`.
std::vector<std::filesystem::path> write_proposal(const ProposalRequest& req);

/// Outcome of `verify_proposal`.
struct VerifyReport {
  std::size_t checked = 0;                                              ///< result rows compared
  std::size_t missing = 0;                                              ///< vector rows with no result
  std::map<std::string, std::pair<std::size_t, std::size_t>> per_file;  ///< file -> (checked, missing)
  std::vector<std::string> problems;  ///< mismatches and manifest failures, one line each

  /// True when nothing is wrong and nothing is missing.
  bool ok() const { return problems.empty() && missing == 0; }
};

/// Checks the MANIFEST hashes of `dir` and compares a vendor's results CSV (columns `file`, `row`
/// and any of `code`, `scales`, `packed`, `decoded`, `result`) with the expected columns of the
/// vector files; every mismatch names the file, row and field. Empty cells are not checked; a
/// vector row none of whose fields was given counts as missing.
VerifyReport verify_proposal(const std::filesystem::path& dir, const std::filesystem::path& results);

/// The TOML text of an element format: format::to_toml (kept for existing callers).
std::string format_to_toml(const format::Format& f);

}  // namespace lpemu::experiment
