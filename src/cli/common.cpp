#include "cli/common.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

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

void ConvertFlags::add_to(CLI::App* sub, std::string default_overflow) {
  overflow = std::move(default_overflow);
  sub->add_option(
         "--rounding", rounding,
         "nearest_even | nearest_away | toward_zero | toward_positive | toward_negative | stochastic")
      ->capture_default_str();
  sub->add_option(
         "--overflow", overflow,
         "saturate (clamp to ±max) | native (the format's Inf/NaN rule; formats without both saturate)")
      ->capture_default_str();
  sub->add_option("--seed", seed, "stochastic rounding seed")->capture_default_str();
  sub->add_option("--sr-bits", sr_bits, "stochastic rounding random bits, 1..32")->capture_default_str();
  sub->add_flag("--ftz", ftz, "flush subnormal results to zero");
  sub->add_flag("--daz", daz, "treat subnormal inputs as zero");
}

format::ConvertOptions ConvertFlags::options() const {
  format::ConvertOptions o;
  o.rounding = format::parse_rounding(rounding);
  o.overflow = format::parse_overflow(overflow);
  o.seed = seed;
  o.sr_bits = sr_bits;
  o.flush_subnormal_outputs = ftz;
  o.flush_subnormal_inputs = daz;
  format::validate(o);
  return o;
}

std::uint64_t parse_code(const std::string& text, const std::string& what) {
  const auto v = io::parse_unsigned(text);
  if (!v)
    throw Error(what + " '" + text + "': expected an unsigned integer code (decimal, 0x hex or 0b binary)");
  return *v;
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

void print_json(const nlohmann::json& j) {
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
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
