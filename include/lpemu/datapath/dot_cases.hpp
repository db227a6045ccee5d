// The dot-product case file of `lpemu dot --cases` (CSV): a header row naming the columns a, b, c
// and optionally scale_a, scale_b, expected_result, row; then one case per row. Codes are hex
// (0x optional); a and b hold several codes separated by ';' or spaces; scales are decimal
// exponents, nan, or 0x codes of the datapath's scale format.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <optional>
#include <string>
#include <vector>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/datapath/dot.hpp"

namespace lpemu::datapath {

/// One parsed case: the codes and scales datapath::dot takes, and the fields as written.
struct DotCase {
  std::size_t line = 0;                                 ///< 1-based line number in the file
  std::string a_text, b_text, c_text;                   ///< the a, b, c fields, trimmed
  std::string scale_a_text, scale_b_text;               ///< the scale fields, trimmed ("" if absent)
  std::vector<std::uint64_t> a, b;                      ///< codes of dp.a and dp.b
  std::uint64_t c = 0;                                  ///< code of dp.output()
  std::vector<std::int32_t> scale_a_exp, scale_b_exp;   ///< block-scale exponents (kNanScale for NaN)
  std::vector<std::uint32_t> scale_a_sig, scale_b_sig;  ///< integer significands (empty when all are 1)
  std::optional<std::uint64_t> expected;                ///< expected_result, when the file has that column
  std::optional<std::uint64_t> row;  ///< the row column (stochastic-rounding index), if present

  /// The scales as datapath::dot and exact_dot take them (views into this case).
  BlockScales scales() const { return {scale_a_exp, scale_b_exp, scale_a_sig, scale_b_sig}; }
};

/// What the header row declares.
struct DotCaseColumns {
  bool scaled = false;    ///< scale_a or scale_b present
  bool expected = false;  ///< expected_result present
};

/// Reads a case file from `in` (`name` names it in errors), checks the header, then calls
/// `on_case` for each non-blank row in order. Every code must fit its format (dp.a, dp.b,
/// dp.output(), dp.scale); errors are SpecError "name:LINE: column 'x' = 'v': expected ...".
/// Returns the header's columns (known before the first case: `on_header` is called first).
DotCaseColumns read_dot_cases(std::istream& in, const std::string& name, const Datapath& dp,
                              const std::function<void(const DotCaseColumns&)>& on_header,
                              const std::function<void(const DotCase&)>& on_case);

}  // namespace lpemu::datapath
