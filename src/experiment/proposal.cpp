#include "lpemu/experiment/proposal.hpp"
#include "lpemu/format/registry.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <system_error>

#include "experiment/proposal_detail.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/io/sha256.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::experiment {
namespace detail {

std::string real(double v) {
  if (std::isnan(v)) return std::signbit(v) ? "-nan" : "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Shortest decimal that reads back as the same float.
std::string real_float(float v) {
  if (!std::isfinite(v)) return real(static_cast<double>(v));
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string hex(std::uint64_t v, int digits) { return io::format_hex(v, digits, true); }

void append_hex(std::string& out, std::uint64_t v, int digits) {
  if (!out.empty()) out += ' ';
  out += io::format_hex(v, digits, false);
}

std::string float_bits_list(std::span<const float> v) {
  std::string out;
  for (const float x : v) append_hex(out, std::bit_cast<std::uint32_t>(x), 8);
  return out;
}

void write_text(const std::filesystem::path& p, const std::string& text) {
  io::write_file_atomic(p, text, io::OutputPolicy{true, {}});  // the package folder was checked by the caller
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : line) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

}  // namespace detail

namespace {

using detail::hex;
using detail::real;
using detail::real_float;
using detail::split_csv;
using detail::write_text;

using format::Format;
using format::Kind;

float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float next_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }

// Finite non-negative values of f that bound its rounding intervals (all of them for narrow
// formats; the edges of every binade plus a sample for wide ones).
std::vector<double> anchor_values(const Format& f, std::uint64_t seed) {
  std::set<double> vals;
  const bool all = f.bits <= 12;
  const std::uint64_t n = f.code_mask() + 1;
  const auto add_code = [&](std::uint64_t c) {
    const double v = format::decode(f, c);
    if (std::isfinite(v) && v >= 0 &&
        std::fabs(v) <= static_cast<double>(std::numeric_limits<float>::max())) {
      vals.insert(v);
    }
  };
  if (all) {
    for (std::uint64_t c = 0; c < n; ++c) add_code(c);
  } else if (f.kind == Kind::floating) {
    const std::uint64_t m = std::uint64_t{1} << f.mantissa_bits;
    for (std::uint64_t field = 0; field <= (f.max_code >> f.mantissa_bits); ++field) {
      for (const std::uint64_t frac : {std::uint64_t{0}, std::uint64_t{1}, m / 2, m - 2, m - 1}) {
        if (frac < m) add_code((field << f.mantissa_bits) | frac);
      }
    }
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 512; ++i) add_code(rng() % (f.max_code + 1));
  } else {
    std::mt19937_64 rng(seed);
    for (std::uint64_t c = 0; c < 64; ++c) {
      add_code(c);
      add_code(f.code_mask() - c);
    }
    for (int i = 0; i < 512; ++i) add_code(rng() & f.code_mask());
  }
  return {vals.begin(), vals.end()};
}

format::Format bf16_format() { return format::make_float("bf16", 8, 7, 127, format::Specials::ieee); }

const char* specials_words(format::Specials s) {
  switch (s) {
    case format::Specials::ieee:
      return "IEEE-like: exponent all ones encodes ±Inf (mantissa 0) and NaN (otherwise)";
    case format::Specials::fn: return "finite: no Inf; the all-ones magnitude code is NaN (one per sign)";
    case format::Specials::fnuz:
      return "finite, unsigned zero: no Inf, no -0; the sign bit alone (-0's code) is the only NaN";
    case format::Specials::none: return "none: every code is a finite number";
  }
  return "";
}

// The element format's encoding, conversion rules and (up to 8 bits) every code.
std::string element_markdown(const Format& f) {
  std::ostringstream s;
  s << "## Element format: " << f.name << "\n\n";
  if (!f.source.empty()) s << "Source: " << f.source << "\n\n";
  s << "### Encoding\n\n| field | value |\n|---|---|\n";
  if (f.kind == Kind::floating) {
    s << "| layout | " << (f.is_signed ? "1 sign bit, " : "unsigned, ") << f.exponent_bits
      << " exponent bits, " << f.mantissa_bits << " mantissa bits (" << f.bits << " bits) |\n";
    s << "| bias | " << f.bias << " |\n";
    s << "| specials | " << specials_words(f.specials) << " |\n";
    s << "| subnormals | "
      << (f.subnormals ? "yes: exponent field 0 is (0.m)·2^" + std::to_string(f.emin) : std::string("no"))
      << " |\n";
    s << "| zero | "
      << (f.has_zero ? "yes" : "no: exponent field 0 is the binade 2^" + std::to_string(f.emin)) << " |\n";
    s << "| value of a normal code | (-1)^s · (1.m) · 2^(e − " << f.bias << ") |\n";
    s << "| max finite | " << real(f.max_finite) << " (" << hex(f.max_code, (f.bits + 3) / 4) << ") |\n";
    s << "| min normal | " << real(f.min_normal) << " = 2^" << f.emin << " |\n";
    s << "| min subnormal | " << real(f.min_subnormal) << " |\n";
    s << "| precision | " << f.mantissa_bits + 1 << " significand bits, epsilon 2^-" << f.mantissa_bits
      << " |\n";
    s << "| dynamic range | " << real(std::log2(f.max_finite / f.min_subnormal)) << " binades |\n";
  } else {
    s << "| layout | " << f.bits << "-bit " << (f.is_signed ? "two's complement" : "unsigned")
      << " integer |\n";
    s << "| value | code · 2^" << -f.fraction_bits << " |\n";
    s << "| range | " << real(f.lowest) << " .. " << real(f.max_finite) << (f.symmetric ? " (symmetric)" : "")
      << " |\n";
  }
  s << "\n### Conversion rules\n\n"
       "- Rounding modes: nearest_even, nearest_away, toward_zero, toward_positive, toward_negative, "
       "stochastic.\n"
       "  Rounding is exact: the input's exact value is rounded to the format's value set.\n"
       "- Stochastic rounding with r random bits R: the magnitude rounds up when the r leading bits of the\n"
       "  discarded fraction plus R carry out of r bits. Vectors give r (`sr_bits`) and R (`random`).\n"
       "- Overflow `native`: Inf where the format has Inf, else NaN where it has NaN, else saturate;\n"
       "  rounding toward zero (for the value's sign) gives ±max finite. Overflow `saturate`: ±max finite,\n"
       "  for ±Inf inputs too.\n"
       "- NaN input: the format's NaN (sign kept where NaN is signed); +0 where the format has no NaN.\n"
       "- Ties at the overflow boundary follow the rounding mode on an unbounded exponent range.\n";
  if (f.bits <= 8) {
    s << "\n### Every code\n\n| code | bits | value |\n|---|---|---|\n";
    for (std::uint64_t c = 0; c <= f.code_mask(); ++c) {
      s << "| " << format::hex_code(f, c) << " | `" << format::fielded_binary(f, c) << "` | "
        << real(format::decode(f, c)) << " |\n";
    }
  }
  return s.str();
}

// The list of files and how to check an implementation against them.
std::string files_markdown(const ProposalRequest& req) {
  std::ostringstream s;
  s << "## Files\n\n"
       "- `format.toml`: the "
    << (req.block ? "block " : "") << "format as lpemu reads it"
    << (req.block ? "; `element.toml`: its element format" : "")
    << ".\n"
       "- `conversion_float32.csv`, `conversion_bf16.csv`: element conversion vectors. Columns: row, "
       "input_format, "
       "input_bits (hex), input_value, rounding, overflow, sr_bits, random, expected_code (hex), "
       "expected_value.\n";
  if (req.block) {
    s << "- `blocks.csv`: block vectors. Columns: row, case, shape, inputs (float32 bits, hex, "
         "space-separated, "
         "row-major), tensor_scale (float32 bits), expected_scales (scale codes in block order), "
         "expected_packed "
         "(element bytes, hex, space-separated), expected_decoded (float32 bits of the decoded tensor).\n";
  }
  if (req.datapath) {
    s << "- `datapath.toml`: the datapath as lpemu reads it; `dot.csv`: dot-product vectors. Columns: row, "
         "case, k, "
         "a, b (codes, hex, space-separated), c (code), scale_a, scale_b (block scale exponents, decimal, "
         "space-separated; empty without block scales), expected_result (code of the output format), "
         "expected_value, exact_value (the exact c + Σ a·b).\n";
  }
  if (req.accuracy) {
    s << "- `summary.md`: accuracy on " << req.accuracy->model
      << " and cost against bf16 and mxfp8; "
         "`accuracy/`: the sweep behind it (report.md, results.csv, results.h5, plots, experiment.toml).\n";
  }
  s << "- `MANIFEST`: SHA-256 of every file (`sha256sum -c MANIFEST` checks it).\n\n"
       "### Checking an implementation\n\n"
       "Compute each vector row and write one CSV with the header "
       "`file,row,code,scales,packed,decoded,result` "
       "(columns you do not produce may be left out or empty): `code` for `conversion_*.csv` rows (hex), "
       "`scales`, `packed` and `decoded` for `blocks.csv` rows (space-separated hex as in the vectors), "
       "`result` "
       "for `dot.csv` rows (hex). Then run `lpemu proposal verify DIR --results THEIR.csv`: it checks the "
       "MANIFEST "
       "and lists every mismatch with its file, row and field. Decoded NaNs match any NaN.\n";
  return s.str();
}

}  // namespace

std::vector<float> boundary_inputs(const Format& f, std::uint64_t seed) {
  std::set<std::uint32_t> bits;
  const auto add = [&](float x) {
    bits.insert(std::bit_cast<std::uint32_t>(x));
    bits.insert(std::bit_cast<std::uint32_t>(-x));
  };
  const auto add_around = [&](float x) {
    float up = x;
    float down = x;
    add(x);
    for (int k = 0; k < 2; ++k) {
      up = next_up(up);
      down = next_down(down);
      add(up);
      add(down);
    }
  };
  const auto vals = anchor_values(f, seed);
  for (std::size_t i = 0; i < vals.size(); ++i) {
    add_around(static_cast<float>(vals[i]));
    if (i + 1 < vals.size()) {
      const double mid = (vals[i] + vals[i + 1]) / 2;  // exact: both are short binary fractions
      add_around(static_cast<float>(mid));
    }
  }
  const double flt_max = static_cast<double>(std::numeric_limits<float>::max());
  if (f.max_finite < flt_max) {
    // Overflow edges: half an ulp above max (the tie), and well beyond.
    const double ulp = f.kind == Kind::floating ? std::ldexp(1.0, f.emax - f.mantissa_bits) : f.min_normal;
    add_around(static_cast<float>(std::min(f.max_finite + ulp / 2, flt_max)));
    add_around(static_cast<float>(std::min(f.max_finite + ulp, flt_max)));
    add(static_cast<float>(std::min(2 * f.max_finite, flt_max)));
  }
  add(std::numeric_limits<float>::max());
  add(std::numeric_limits<float>::infinity());
  add(std::numeric_limits<float>::quiet_NaN());
  add(0.0F);
  add(std::numeric_limits<float>::denorm_min());
  add(std::numeric_limits<float>::min());
  if (f.min_subnormal / 2 >= static_cast<double>(std::numeric_limits<float>::denorm_min())) {
    add_around(static_cast<float>(f.min_subnormal / 2));
    add_around(static_cast<float>(f.min_subnormal / 4));
  }
  std::mt19937_64 rng(seed);
  const double lo = std::log2(std::max(f.min_subnormal, 1e-38) / 4);
  const double hi = std::log2(std::min(f.max_finite * 4, flt_max));
  std::uniform_real_distribution<double> e(lo, hi);
  for (int i = 0; i < 256; ++i) add(static_cast<float>(std::exp2(e(rng))));
  std::vector<float> out;
  out.reserve(bits.size());
  for (const auto b : bits) out.push_back(std::bit_cast<float>(b));
  return out;
}

std::vector<ConversionVector> conversion_vectors(const Format& f, bool bf16_inputs, std::uint64_t seed) {
  std::vector<float> inputs = boundary_inputs(f, seed);
  const Format bf16 = bf16_format();
  if (bf16_inputs) {
    // The same boundary points as bf16 inputs (each rounded to bf16), deduplicated.
    std::set<std::uint32_t> b;
    for (const float x : inputs) b.insert(static_cast<std::uint32_t>(format::encode(bf16, x)));
    inputs.clear();
    for (const auto c : b) inputs.push_back(static_cast<float>(format::decode(bf16, c)));
  }
  std::vector<ConversionVector> rows;
  std::uint64_t row = 0;
  for (const float x : inputs) {
    const std::uint32_t in_bits =
        bf16_inputs ? static_cast<std::uint32_t>(format::encode(bf16, x)) : std::bit_cast<std::uint32_t>(x);
    for (const auto mode : format::kAllRoundingModes) {
      for (const auto ov : format::kAllOverflowPolicies) {
        format::ConvertOptions o;
        o.rounding = mode;
        o.overflow = ov;
        ConversionVector v;
        v.input_bits = in_bits;
        v.input_value = x;
        v.rounding = mode;
        v.overflow = ov;
        if (mode == format::RoundingMode::stochastic) {
          // Three random draws with 8 random bits, from a fixed counter-based stream.
          o.sr_bits = 8;
          o.seed = seed;
          for (int k = 0; k < 3; ++k) {
            const std::uint64_t index = row;
            v.row = row++;
            v.sr_bits = o.sr_bits;
            v.random = format::sr_random_bits(seed, index) >> (32 - o.sr_bits);
            v.expected_code = format::encode(f, x, o, index);
            v.expected_value = format::decode(f, v.expected_code);
            rows.push_back(v);
          }
          continue;
        }
        v.row = row++;
        v.expected_code = format::encode(f, x, o);
        v.expected_value = format::decode(f, v.expected_code);
        rows.push_back(v);
      }
    }
  }
  return rows;
}

std::string format_to_toml(const Format& f) { return format::to_toml(f); }

namespace {

// Writes the package's files into req.out (which exists), appending each to `files` once complete.
void write_package(const ProposalRequest& req, std::vector<std::filesystem::path>& files) {
  namespace fs = std::filesystem;
  const Format& f = req.format;
  std::ostringstream spec;
  spec << "# Format proposal: " << (req.block ? req.block->name : f.name)
       << (req.datapath ? " on datapath " + req.datapath->name : std::string()) << "\n\n"
       << "Written by lpemu. Every expected output below comes from lpemu's exact conversion and datapath "
          "arithmetic (each checked against an independent reference in lpemu's test suite).\n\n";
  if (req.accuracy) spec << "Accuracy and cost on " << req.accuracy->model << ": see `summary.md`.\n\n";
  if (req.block) spec << detail::block_spec_markdown(*req.block) << "\n";
  spec << element_markdown(f) << "\n";
  if (req.datapath) spec << detail::datapath_spec_markdown(*req.datapath) << "\n";
  spec << files_markdown(req);
  write_text(req.out / "spec.md", spec.str());
  files.push_back(req.out / "spec.md");
  const std::string own_toml = req.block ? std::string() : format_to_toml(f);
  write_text(req.out / "format.toml", req.format_toml.empty() ? own_toml : req.format_toml);
  files.push_back(req.out / "format.toml");
  if (req.block) {
    write_text(req.out / "element.toml", req.element_toml.empty() ? format_to_toml(f) : req.element_toml);
    files.push_back(req.out / "element.toml");
  }
  for (const bool bf16 : {false, true}) {
    const auto rows = conversion_vectors(f, bf16, req.seed);
    const fs::path p = req.out / (bf16 ? "conversion_bf16.csv" : "conversion_float32.csv");
    std::ostringstream out;
    out << "row,input_format,input_bits,input_value,rounding,overflow,sr_bits,random,expected_code,expected_"
           "value\n";
    const int code_digits = (f.bits + 3) / 4;
    for (const auto& v : rows) {
      out << v.row << ',' << (bf16 ? "bf16" : "fp32") << ',' << hex(v.input_bits, bf16 ? 4 : 8) << ','
          << real_float(static_cast<float>(v.input_value)) << ',' << format::to_string(v.rounding) << ','
          << format::to_string(v.overflow) << ',' << (v.sr_bits > 0 ? std::to_string(v.sr_bits) : "") << ','
          << (v.sr_bits > 0 ? hex(v.random, 2) : "") << ',' << hex(v.expected_code, code_digits) << ','
          << real(v.expected_value) << '\n';
    }
    write_text(p, out.str());
    files.push_back(p);
  }
  if (req.block) files.push_back(detail::write_block_vectors(req.out, *req.block, req.seed));
  if (req.datapath) {
    write_text(req.out / "datapath.toml", req.datapath_toml);
    files.push_back(req.out / "datapath.toml");
    files.push_back(detail::write_dot_vectors(req.out, *req.datapath, req.seed));
  }
  if (req.accuracy) {
    for (auto& p : detail::write_accuracy(req.out, req)) files.push_back(std::move(p));
  }
  std::string manifest;
  for (const auto& p : files) {
    manifest += io::sha256_file(p) + "  " + fs::relative(p, req.out).generic_string() + "\n";
  }
  write_text(req.out / "MANIFEST", manifest);
  files.push_back(req.out / "MANIFEST");
}

}  // namespace

std::vector<std::filesystem::path> write_proposal(const ProposalRequest& req) {
  namespace fs = std::filesystem;
  if (fs::exists(req.out) && !fs::is_directory(req.out)) {
    throw IoError(req.out.string() + ": not a directory: expected a folder for the package (or a new name)");
  }
  if (fs::exists(req.out) && !fs::is_empty(req.out) && !req.force) {
    throw IoError(req.out.string() +
                  ": directory exists and is not empty; pass --force to replace its files");
  }
  const bool created = !fs::exists(req.out);
  io::create_output_dir(req.out);
  std::vector<fs::path> files;
  try {
    write_package(req, files);
  } catch (...) {
    // A package stopped half way (a full disk, a file-size limit) is not a package: nothing of this
    // run stays, the folder too when this run created it.
    std::error_code ec;
    if (created) {
      fs::remove_all(req.out, ec);
    } else {
      for (const auto& p : files) fs::remove(p, ec);
    }
    throw;
  }
  return files;
}

namespace {

// The fields a results file may give per vector file, and the column holding the expected value.
struct CheckField {
  const char* file_prefix;
  const char* field;
  const char* expected_column;
  bool float_bits;  ///< values are float32 bit patterns: any NaN matches any NaN
};
constexpr CheckField kCheckFields[] = {
    {"conversion_", "code", "expected_code", false}, {"blocks", "scales", "expected_scales", false},
    {"blocks", "packed", "expected_packed", false},  {"blocks", "decoded", "expected_decoded", true},
    {"dot", "result", "expected_result", false},
};

// Parses a space-separated list of hex numbers (with or without 0x); false if one is not hex.
bool parse_hex_list(const std::string& text, std::vector<std::uint64_t>& out) {
  out.clear();
  std::istringstream in(text);
  std::string tok;
  while (in >> tok) {
    if (tok.size() > 2 && tok[0] == '0' && (tok[1] == 'x' || tok[1] == 'X')) tok = tok.substr(2);
    std::uint64_t v = 0;
    const auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v, 16);
    if (r.ec != std::errc() || r.ptr != tok.data() + tok.size()) return false;
    out.push_back(v);
  }
  return true;
}

bool is_float_nan(std::uint64_t bits) {
  return (bits & 0x7f800000U) == 0x7f800000U && (bits & 0x7fffffU) != 0;
}

// Compares a given value with the expected one; empty string when they match, else why not.
std::string compare_field(const CheckField& f, const std::string& want, const std::string& got) {
  std::vector<std::uint64_t> w;
  std::vector<std::uint64_t> g;
  parse_hex_list(want, w);
  if (!parse_hex_list(got, g)) return "'" + got + "' is not hex";
  if (w.size() != g.size()) {
    return std::to_string(g.size()) + " values given, " + std::to_string(w.size()) + " expected";
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w[i] == g[i] || (f.float_bits && is_float_nan(w[i]) && is_float_nan(g[i]))) continue;
    const std::string at = w.size() > 1 ? " at position " + std::to_string(i) : std::string();
    return "expected " + hex(w[i], 1) + ", got " + hex(g[i], 1) + at;
  }
  return {};
}

struct ExpectedRow {
  std::map<std::string, std::string> fields;  ///< field -> expected text
  std::string context;                        ///< what the row is, for messages
};

}  // namespace

VerifyReport verify_proposal(const std::filesystem::path& dir, const std::filesystem::path& results) {
  namespace fs = std::filesystem;
  VerifyReport rep;
  const fs::path manifest = dir / "MANIFEST";
  if (!fs::exists(manifest))
    throw IoError(manifest.string() + ": cannot open (is " + dir.string() + " a proposal directory?)");
  std::istringstream mf(io::read_input(manifest, std::size_t{1} << 20));
  std::string line;
  std::vector<std::string> vector_files;
  while (std::getline(mf, line)) {
    if (line.empty()) continue;
    const auto sep = line.find("  ");
    if (sep == std::string::npos) throw IoError(manifest.string() + ": malformed line '" + line + "'");
    const std::string want = line.substr(0, sep);
    const std::string name = line.substr(sep + 2);
    if (want.size() != 64 || want.find_first_not_of("0123456789abcdef") != std::string::npos) {
      throw IoError(manifest.string() + ": line '" + line +
                    "': expected 64 lowercase hex digits (SHA-256), two spaces, a file name");
    }
    // Only files inside the package: never an absolute path or one that climbs out with "..".
    const fs::path rel(name);
    if (name.empty() || rel.is_absolute() ||
        std::any_of(rel.begin(), rel.end(), [](const fs::path& part) { return part == ".."; })) {
      throw IoError(manifest.string() + ": file name '" + name + "': expected a path inside " + dir.string());
    }
    std::error_code ec;  // a name the file system refuses (too long, ...) is bad input, not a crash
    const bool regular = fs::is_regular_file(dir / name, ec);
    if (ec) throw IoError(manifest.string() + ": file name '" + name + "': " + ec.message());
    if (!regular) {
      rep.problems.push_back("MANIFEST: " + name + " is missing");
      continue;
    }
    if (io::sha256_file(dir / name) != want)
      rep.problems.push_back("MANIFEST: " + name + " does not match its SHA-256");
    const bool vectors =
        std::any_of(std::begin(kCheckFields), std::end(kCheckFields), [&](const CheckField& c) {
          return name.rfind(c.file_prefix, 0) == 0 && name.size() > 4 &&
                 name.substr(name.size() - 4) == ".csv";
        });
    if (vectors) vector_files.push_back(name);
  }
  // Expected fields by (file, row).
  std::map<std::pair<std::string, std::uint64_t>, ExpectedRow> expected;
  for (const auto& name : vector_files) {
    const fs::path path = dir / name;
    std::ifstream in(path);
    if (!std::getline(in, line)) throw IoError(path.string() + ": empty vector file");
    const auto header = split_csv(line);
    std::vector<std::pair<const CheckField*, std::size_t>> cols;
    for (const auto& cf : kCheckFields) {
      if (name.rfind(cf.file_prefix, 0) != 0) continue;
      const auto it = std::find(header.begin(), header.end(), cf.expected_column);
      if (it == header.end())
        throw IoError(path.string() + ": header lacks column '" + cf.expected_column + "'");
      cols.emplace_back(&cf, static_cast<std::size_t>(it - header.begin()));
    }
    std::size_t line_no = 1;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty()) continue;
      const auto c = split_csv(line);
      if (c.size() != header.size()) {
        throw IoError(path.string() + ":" + std::to_string(line_no) + ": " + std::to_string(c.size()) +
                      " columns, the header has " + std::to_string(header.size()));
      }
      ExpectedRow row;
      for (const auto& [cf, k] : cols) row.fields[cf->field] = c[k];
      // Context: the row's leading descriptive columns (inputs are long for blocks and dots).
      for (std::size_t k = 1; k < std::min<std::size_t>(c.size(), 6); ++k) {
        if (c[k].size() > 40) continue;
        row.context += (row.context.empty() ? "" : ", ") + header[k] + " " + c[k];
      }
      std::uint64_t index = 0;
      const auto [end, ec] = std::from_chars(c[0].data(), c[0].data() + c[0].size(), index);
      if (ec != std::errc() || end != c[0].data() + c[0].size() || c[0].empty()) {
        throw IoError(path.string() + ":" + std::to_string(line_no) + ": column '" + header[0] + "' = '" +
                      c[0] + "': expected a row number");
      }
      expected[{name, index}] = std::move(row);
    }
  }
  std::ifstream rin(results);
  if (!rin) throw IoError(results.string() + ": cannot open results");
  if (!std::getline(rin, line)) throw IoError(results.string() + ": empty results file");
  const auto header = split_csv(line);
  const auto find_col = [&](const std::string& n) -> std::optional<std::size_t> {
    const auto it = std::find(header.begin(), header.end(), n);
    if (it == header.end()) return std::nullopt;
    return static_cast<std::size_t>(it - header.begin());
  };
  const auto cf = find_col("file");
  const auto cr = find_col("row");
  if (!cf || !cr)
    throw IoError(results.string() + ": header lacks column 'file' or 'row' (expected file,row,code,...)");
  std::vector<std::pair<const CheckField*, std::size_t>> given;  // field, its column in the results
  for (const auto& chk : kCheckFields) {
    if (const auto k = find_col(chk.field)) given.emplace_back(&chk, *k);
  }
  if (given.empty()) {
    throw IoError(results.string() +
                  ": header has none of the result columns code, scales, packed, decoded, result");
  }
  std::set<std::pair<std::string, std::uint64_t>> seen;
  std::size_t line_no = 1;
  while (std::getline(rin, line)) {
    ++line_no;
    if (line.empty()) continue;
    const auto c = split_csv(line);
    const std::string where = results.string() + ":" + std::to_string(line_no);
    if (c.size() <= std::max(*cf, *cr)) {
      rep.problems.push_back(where + ": too few columns");
      continue;
    }
    std::uint64_t row = 0;
    const auto r = std::from_chars(c[*cr].data(), c[*cr].data() + c[*cr].size(), row);
    if (r.ec != std::errc() || r.ptr != c[*cr].data() + c[*cr].size()) {
      rep.problems.push_back(where + ": field 'row' is not a row number ('" + c[*cr] + "')");
      continue;
    }
    const auto key = std::make_pair(c[*cf], row);
    const auto it = expected.find(key);
    if (it == expected.end()) {
      rep.problems.push_back(where + ": " + c[*cf] + " has no row " + std::to_string(row));
      continue;
    }
    bool any = false;
    for (const auto& [chk, k] : given) {
      if (k >= c.size() || c[k].empty()) continue;
      const std::string field = chk->field;
      const auto want = it->second.fields.find(field);
      if (want == it->second.fields.end()) {
        rep.problems.push_back(where + ": " + c[*cf] + " has no field '" + field + "'");
        continue;
      }
      any = true;
      const std::string why = compare_field(*chk, want->second, c[k]);
      if (!why.empty()) {
        rep.problems.push_back(c[*cf] + " row " + std::to_string(row) + " field " + field + ": " + why +
                               " (" + it->second.context + ")");
      }
    }
    if (any) {
      seen.insert(key);
      ++rep.checked;
    }
  }
  rep.missing = expected.size() - seen.size();
  for (const auto& [key, row] : expected) {
    auto& [checked, missing] = rep.per_file[key.first];
    ++(seen.count(key) ? checked : missing);
  }
  return rep;
}

}  // namespace lpemu::experiment
