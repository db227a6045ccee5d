// Format proposals for hardware vendors (issue 8): a self-contained directory with the encoding
// spec, conversion test vectors whose expected codes come from lpemu's exact conversion, a
// SHA-256 MANIFEST, and a verifier for a vendor's results.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "lpemu/format/format.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::experiment {

/// One conversion test vector: an input (float32 or bf16 bits) and the expected code.
struct ConversionVector {
  std::uint64_t row = 0;
  std::uint32_t input_bits = 0;  ///< float32 bits, or bf16 bits right-aligned
  double input_value = 0;
  format::RoundingMode rounding = format::RoundingMode::nearest_even;
  format::Overflow overflow = format::Overflow::native;
  int sr_bits = 0;          ///< stochastic rows only
  std::uint32_t random = 0;  ///< stochastic rows only: the r random bits used
  std::uint64_t expected_code = 0;
  double expected_value = 0;
};

/// The inputs that exercise every boundary of `f`: each value, each midpoint and their float32
/// neighbours, overflow and underflow edges, NaN, ±Inf, ±0, plus a seeded random sample.
std::vector<float> boundary_inputs(const format::Format& f, std::uint64_t seed);

/// Conversion vectors from float32 (`bf16_inputs` false) or bf16 inputs into `f`, for every
/// rounding mode and overflow policy (stochastic rows carry their random bits).
std::vector<ConversionVector> conversion_vectors(const format::Format& f, bool bf16_inputs, std::uint64_t seed);

/// What a proposal is written from.
struct ProposalRequest {
  format::Format format;
  std::string format_toml;  ///< the spec file's text, copied into the package
  std::filesystem::path out;
  bool force = false;       ///< replace files of an existing package
  std::uint64_t seed = 1;   ///< random sample of the vectors
};

/// Writes the package (spec.md, format.toml, conversion_float32.csv, conversion_bf16.csv,
/// MANIFEST) and returns the files written. Refuses a non-empty `out` unless `force`.
std::vector<std::filesystem::path> write_proposal(const ProposalRequest& req);

/// Outcome of `verify_proposal`.
struct VerifyReport {
  std::size_t checked = 0;                 ///< result rows compared
  std::size_t missing = 0;                 ///< vector rows with no result
  std::vector<std::string> problems;       ///< mismatches and manifest failures, one line each

  /// True when nothing is wrong and nothing is missing.
  bool ok() const { return problems.empty() && missing == 0; }
};

/// Checks the MANIFEST hashes of `dir` and compares a vendor's results CSV (columns `file`, `row`,
/// `code` in hex) with the expected codes; every mismatch names the file, row and field.
VerifyReport verify_proposal(const std::filesystem::path& dir, const std::filesystem::path& results);

/// The TOML text of an element format (the same fields a user writes).
std::string format_to_toml(const format::Format& f);

}  // namespace lpemu::experiment
