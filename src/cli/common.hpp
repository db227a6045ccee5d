// Shared pieces of the `lpemu` command: global options, registries, option groups, output.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tbb/global_control.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "lpemu/app/fields.hpp"
#include "lpemu/block/block_format.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/engine/quantizer.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::cli {

/// Options every command sees on top of the library's registries and factories.
struct Context : experiment::Context {
  int threads = 0;  ///< 0: oneTBB's default (all cores)

  /// The CLI's model/plan search directories: the executable's folder and its two parents,
  /// PREFIX/share/lpemu of an install, the source tree lpemu was built from, $LPEMU_DATA_DIR, the working
  /// directory.
  Context();
  /// Applies --threads for the rest of the process (only the CLI creates tbb::global_control).
  void apply_threads();

 private:
  std::unique_ptr<tbb::global_control> control_;
};

/// Adds --rounding, --overflow, --seed, --sr-bits, --ftz, --daz to `sub`, bound into `o`; --overflow
/// starts at `default_overflow`.
void add_convert_options(CLI::App* sub, format::ConvertOptions& o,
                         format::Overflow default_overflow = format::Overflow::native);

/// CLI11 transform for an enum option: accepts the library's spelling (`to_string`) of each of
/// `values` and stores that value; any other word fails with CLI::IsMember's "WORD not in {a,b,c}".
template <class E, std::size_t N>
CLI::Validator enum_names(const E (&values)[N]) {
  std::vector<std::string> names;
  std::vector<std::pair<std::string, E>> map;
  for (const E v : values) {
    names.emplace_back(to_string(v));
    map.emplace_back(names.back(), v);
  }
  CLI::Validator v = CLI::IsMember(names) & CLI::Transformer(map);
  v.description(CLI::detail::generate_set(names));
  return v;
}

/// CLI11 check by a library parser: `parse(word)` must not throw lpemu::Error; its message is the
/// check's (for fixed choices whose name table stays in the library, aliases included).
template <class Parse>
CLI::Validator parsed_by(Parse parse, std::string description) {
  return {[parse](std::string& word) -> std::string {
            try {
              parse(word);
              return {};
            } catch (const Error& e) {
              return e.what();
            }
          },
          std::move(description)};
}

/// CLI11 check for counts and sizes: an integer of at least `min` (else "WORD: expected an integer >=
/// MIN"; the option name is added by CLI11).
CLI::Validator at_least(long long min);

/// CLI11 check for counts with a ceiling: an integer in `min`..`max` (else "WORD: expected an integer in
/// MIN..MAX", with `why` after the range when given).
CLI::Validator in_range(long long min, long long max, std::string why = {});

/// CLI11 check for seeds: decimal digits of an integer in 0..2^64-1; a sign, a fraction or a larger
/// number is refused (never wrapped or clamped).
CLI::Validator seed_value();

/// Parses a real number (decimal, hex float, inf, nan); throws lpemu::Error naming `what`.
double parse_real(const std::string& text, const std::string& what);
/// Prints `j` and a newline to stdout; NaN and ±Inf numbers print as null, invalid UTF-8 as U+FFFD.
void print_json(const app::Fields& j);
/// Prints a result's `timing` fields (seconds per stage) as one standard-error line for --verbose:
/// "lpemu: WHAT timing: load 0.21 s, plan_prepare 0.52 s, ...".
void print_timing(const std::string& what, const app::Fields& timing);
/// Shortest decimal that round-trips a double ("448", "0.001953125", "inf", "nan", "-nan").
std::string format_real(double v);

}  // namespace lpemu::cli
