#include "cli/common.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <system_error>

#include "lpemu/block/block_format.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::cli {

void Context::apply_threads() {
  if (threads > 0 && !control_) {
    control_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                     static_cast<std::size_t>(threads));
  }
}

void add_convert_options(CLI::App* sub, format::ConvertOptions& o, format::Overflow default_overflow) {
  o.overflow = default_overflow;
  // add_option_function: CLI11 2.1 cannot print a default through the library's to_string.
  sub->add_option_function<format::RoundingMode>(
         "--rounding", [&o](format::RoundingMode m) { o.rounding = m; }, "rounding mode")
      ->transform(enum_names(format::kAllRoundingModes))
      ->type_name("NAME")
      ->default_str(std::string(format::to_string(o.rounding)));
  sub->add_option_function<format::Overflow>(
         "--overflow", [&o](format::Overflow v) { o.overflow = v; },
         "saturate (clamp to ±max) | native (the format's Inf/NaN rule; formats without both saturate)")
      ->transform(enum_names(format::kAllOverflowPolicies))
      ->type_name("NAME")
      ->default_str(std::string(format::to_string(o.overflow)));
  sub->add_option("--seed", o.seed, "stochastic rounding seed")->capture_default_str()->check(seed_value());
  sub->add_option("--sr-bits", o.sr_bits, "stochastic rounding random bits")
      ->capture_default_str()
      ->check(CLI::Range(1, 32));
  sub->add_flag("--ftz", o.flush_subnormal_outputs, "flush subnormal results to zero");
  sub->add_flag("--daz", o.flush_subnormal_inputs, "treat subnormal inputs as zero");
}

CLI::Validator at_least(long long min) {
  const std::string want = ">= " + std::to_string(min);
  return {[min, want](std::string& word) -> std::string {
            long long v = 0;
            if (CLI::detail::lexical_cast(word, v) && v >= min) return {};
            return io::trim(word) + ": expected an integer " + want;
          },
          want};
}

CLI::Validator in_range(long long min, long long max, std::string why) {
  const std::string want = "in " + std::to_string(min) + ".." + std::to_string(max);
  const std::string tail = why.empty() ? std::string() : " (" + why + ")";
  return {[min, max, want, tail](std::string& word) -> std::string {
            long long v = 0;
            if (CLI::detail::lexical_cast(word, v) && v >= min && v <= max) return {};
            return io::trim(word) + ": expected an integer " + want + tail;
          },
          want};
}

CLI::Validator seed_value() {
  return {[](std::string& word) -> std::string {
            const std::string w = io::trim(word);
            std::uint64_t v = 0;
            const char* end = w.data() + w.size();
            const auto r = std::from_chars(w.data(), end, v);
            if (!w.empty() && r.ec == std::errc() && r.ptr == end) return {};
            return w + ": expected an integer in 0..18446744073709551615";
          },
          "0..2^64-1"};
}

double parse_real(const std::string& text, const std::string& what) {
  const char* b = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(b, &end);
  if (text.empty() || end != b + text.size()) {
    throw Error(what + " '" + text + "': expected a real number (e.g. 0.1, -3e5, 0x1.8p+3, inf, nan)");
  }
  return v;
}

void print_json(const app::Fields& j) { std::cout << app::json_text(j) << "\n"; }

void print_timing(const std::string& what, const app::Fields& timing) {
  std::string line;
  for (const auto& [key, value] : timing.items()) {
    std::string name = key;
    if (name.size() > 2 && name.ends_with("_s")) name.resize(name.size() - 2);
    line += (line.empty() ? "" : ", ") + name + " " +
            io::format_number(value.get<double>(), io::NumberStyle::significant, 3) + " s";
  }
  std::cerr << "lpemu: " << what << " timing: " << line << "\n";
}

std::string format_real(double v) { return io::format_number(v, io::NumberStyle::shortest); }

Context::Context() {
  namespace fs = std::filesystem;
  std::vector<fs::path> dirs;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path d = exe.parent_path();
    for (int i = 0; i < 3 && !d.empty(); ++i, d = d.parent_path()) dirs.push_back(d);
    dirs.push_back(exe.parent_path().parent_path() / "share" / "lpemu");  // an installed prefix
  }
#ifdef LPEMU_SOURCE_DIR
  dirs.emplace_back(LPEMU_SOURCE_DIR);
#endif
  data_dirs = experiment::data_search_dirs(std::move(dirs));
}

}  // namespace lpemu::cli
