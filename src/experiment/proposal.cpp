#include "lpemu/experiment/proposal.hpp"

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

#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/sha256.hpp"

namespace lpemu::experiment {
namespace {

using format::Format;
using format::Kind;

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

std::string hex(std::uint64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

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
    if (std::isfinite(v) && v >= 0 && std::fabs(v) <= static_cast<double>(std::numeric_limits<float>::max())) {
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

const char* specials_words(format::Specials s) {
  switch (s) {
    case format::Specials::ieee: return "IEEE-like: exponent all ones encodes ±Inf (mantissa 0) and NaN (otherwise)";
    case format::Specials::fn: return "finite: no Inf; the all-ones magnitude code is NaN (one per sign)";
    case format::Specials::fnuz: return "finite, unsigned zero: no Inf, no -0; the sign bit alone (-0's code) is the only NaN";
    case format::Specials::none: return "none: every code is a finite number";
  }
  return "";
}

std::string spec_markdown(const Format& f) {
  std::ostringstream s;
  s << "# Format proposal: " << f.name << "\n\n";
  if (!f.source.empty()) s << "Source: " << f.source << "\n\n";
  s << "## Encoding\n\n| field | value |\n|---|---|\n";
  if (f.kind == Kind::floating) {
    s << "| layout | " << (f.is_signed ? "1 sign bit, " : "unsigned, ") << f.exponent_bits << " exponent bits, "
      << f.mantissa_bits << " mantissa bits (" << f.bits << " bits) |\n";
    s << "| bias | " << f.bias << " |\n";
    s << "| specials | " << specials_words(f.specials) << " |\n";
    s << "| subnormals | " << (f.subnormals ? "yes: exponent field 0 is (0.m)·2^" + std::to_string(f.emin) : std::string("no")) << " |\n";
    s << "| zero | " << (f.has_zero ? "yes" : "no: exponent field 0 is the binade 2^" + std::to_string(f.emin)) << " |\n";
    s << "| value of a normal code | (-1)^s · (1.m) · 2^(e − " << f.bias << ") |\n";
    s << "| max finite | " << real(f.max_finite) << " (" << hex(f.max_code, (f.bits + 3) / 4) << ") |\n";
    s << "| min normal | " << real(f.min_normal) << " = 2^" << f.emin << " |\n";
    s << "| min subnormal | " << real(f.min_subnormal) << " |\n";
    s << "| precision | " << f.mantissa_bits + 1 << " significand bits, epsilon 2^-" << f.mantissa_bits << " |\n";
    s << "| dynamic range | " << real(std::log2(f.max_finite / f.min_subnormal)) << " binades |\n";
  } else {
    s << "| layout | " << f.bits << "-bit " << (f.is_signed ? "two's complement" : "unsigned") << " integer |\n";
    s << "| value | code · 2^" << -f.fraction_bits << " |\n";
    s << "| range | " << real(f.lowest) << " .. " << real(f.max_finite) << (f.symmetric ? " (symmetric)" : "") << " |\n";
  }
  s << "\n## Conversion rules\n\n"
       "- Rounding modes: nearest_even, nearest_away, toward_zero, toward_positive, toward_negative, stochastic.\n"
       "  Rounding is exact: the input's exact value is rounded to the format's value set.\n"
       "- Stochastic rounding with r random bits R: the magnitude rounds up when the r leading bits of the\n"
       "  discarded fraction plus R carry out of r bits. Vectors give r (`sr_bits`) and R (`random`).\n"
       "- Overflow `native`: Inf where the format has Inf, else NaN where it has NaN, else saturate;\n"
       "  rounding toward zero (for the value's sign) gives ±max finite. Overflow `saturate`: ±max finite,\n"
       "  for ±Inf inputs too.\n"
       "- NaN input: the format's NaN (sign kept where NaN is signed); +0 where the format has no NaN.\n"
       "- Ties at the overflow boundary follow the rounding mode on an unbounded exponent range.\n";
  if (f.bits <= 8) {
    s << "\n## Every code\n\n| code | bits | value |\n|---|---|---|\n";
    for (std::uint64_t c = 0; c <= f.code_mask(); ++c) {
      s << "| " << format::hex_code(f, c) << " | `" << format::fielded_binary(f, c) << "` | "
        << real(format::decode(f, c)) << " |\n";
    }
  }
  s << "\n## Files\n\n"
       "- `format.toml`: the format as lpemu reads it.\n"
       "- `conversion_float32.csv`, `conversion_bf16.csv`: test vectors. Columns: row, input_format, input_bits "
       "(hex), input_value, rounding, overflow, sr_bits, random, expected_code (hex), expected_value.\n"
       "- `MANIFEST`: SHA-256 of every file (`sha256sum -c MANIFEST` checks it).\n\n"
       "To check an implementation, convert each row's input and write a CSV with columns `file,row,code` "
       "(code in hex), then run `lpemu proposal verify DIR --results THEIR.csv`.\n";
  return s.str();
}

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  if (!out) throw IoError(p.string() + ": cannot open for writing");
  out << text;
  if (!out) throw IoError(p.string() + ": write failed");
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
    const std::uint32_t in_bits = bf16_inputs ? static_cast<std::uint32_t>(format::encode(bf16, x))
                                              : std::bit_cast<std::uint32_t>(x);
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

std::string format_to_toml(const Format& f) {
  std::ostringstream s;
  s << "name = \"" << f.name << "\"\n";
  if (!f.source.empty()) s << "source = \"" << f.source << "\"\n";
  if (f.kind == Kind::floating) {
    s << "kind = \"float\"\nexponent_bits = " << f.exponent_bits << "\nmantissa_bits = " << f.mantissa_bits
      << "\nbias = " << f.bias << "\nspecials = \"" << format::to_string(f.specials) << "\"\nsubnormals = "
      << (f.subnormals ? "true" : "false") << "\nsigned = " << (f.is_signed ? "true" : "false")
      << "\nzero = " << (f.has_zero ? "true" : "false") << "\n";
  } else {
    s << "kind = \"int\"\nbits = " << f.bits << "\nsigned = " << (f.is_signed ? "true" : "false")
      << "\nfraction_bits = " << f.fraction_bits << "\nsymmetric = " << (f.symmetric ? "true" : "false") << "\n";
  }
  return s.str();
}

std::vector<std::filesystem::path> write_proposal(const ProposalRequest& req) {
  namespace fs = std::filesystem;
  if (fs::exists(req.out) && !fs::is_empty(req.out) && !req.force) {
    throw IoError(req.out.string() + ": directory exists and is not empty; pass --force to replace its files");
  }
  fs::create_directories(req.out);
  const Format& f = req.format;
  std::vector<fs::path> files;
  write_text(req.out / "spec.md", spec_markdown(f));
  files.push_back(req.out / "spec.md");
  write_text(req.out / "format.toml", req.format_toml.empty() ? format_to_toml(f) : req.format_toml);
  files.push_back(req.out / "format.toml");
  for (const bool bf16 : {false, true}) {
    const auto rows = conversion_vectors(f, bf16, req.seed);
    const fs::path p = req.out / (bf16 ? "conversion_bf16.csv" : "conversion_float32.csv");
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(p.string() + ": cannot open for writing");
    out << "row,input_format,input_bits,input_value,rounding,overflow,sr_bits,random,expected_code,expected_value\n";
    const int code_digits = (f.bits + 3) / 4;
    for (const auto& v : rows) {
      out << v.row << ',' << (bf16 ? "bf16" : "fp32") << ',' << hex(v.input_bits, bf16 ? 4 : 8) << ','
          << real_float(static_cast<float>(v.input_value)) << ',' << format::to_string(v.rounding) << ',' << format::to_string(v.overflow)
          << ',' << (v.sr_bits > 0 ? std::to_string(v.sr_bits) : "") << ','
          << (v.sr_bits > 0 ? hex(v.random, 2) : "") << ',' << hex(v.expected_code, code_digits) << ','
          << real(v.expected_value) << '\n';
    }
    if (!out) throw IoError(p.string() + ": write failed");
    files.push_back(p);
  }
  std::string manifest;
  for (const auto& p : files) manifest += io::sha256_file(p) + "  " + p.filename().string() + "\n";
  write_text(req.out / "MANIFEST", manifest);
  files.push_back(req.out / "MANIFEST");
  return files;
}

VerifyReport verify_proposal(const std::filesystem::path& dir, const std::filesystem::path& results) {
  namespace fs = std::filesystem;
  VerifyReport rep;
  const fs::path manifest = dir / "MANIFEST";
  std::ifstream mf(manifest);
  if (!mf) throw IoError(manifest.string() + ": cannot open (is " + dir.string() + " a proposal directory?)");
  std::string line;
  std::vector<std::string> vector_files;
  while (std::getline(mf, line)) {
    if (line.empty()) continue;
    const auto sep = line.find("  ");
    if (sep == std::string::npos) throw IoError(manifest.string() + ": malformed line '" + line + "'");
    const std::string want = line.substr(0, sep);
    const std::string name = line.substr(sep + 2);
    if (!fs::exists(dir / name)) {
      rep.problems.push_back("MANIFEST: " + name + " is missing");
      continue;
    }
    if (io::sha256_file(dir / name) != want) rep.problems.push_back("MANIFEST: " + name + " does not match its SHA-256");
    if (name.rfind("conversion_", 0) == 0) vector_files.push_back(name);
  }
  // Expected codes by (file, row).
  std::map<std::pair<std::string, std::uint64_t>, std::pair<std::uint64_t, std::string>> expected;
  for (const auto& name : vector_files) {
    std::ifstream in(dir / name);
    std::getline(in, line);
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const auto c = split_csv(line);
      if (c.size() < 10) throw IoError((dir / name).string() + ": malformed row '" + line + "'");
      expected[{name, std::stoull(c[0])}] = {std::stoull(c[8], nullptr, 16),
                                             "input " + c[2] + " (" + c[3] + "), " + c[4] + ", " + c[5]};
    }
  }
  std::ifstream rin(results);
  if (!rin) throw IoError(results.string() + ": cannot open results");
  if (!std::getline(rin, line)) throw IoError(results.string() + ": empty results file");
  const auto header = split_csv(line);
  const auto col = [&](const std::string& n) -> std::size_t {
    const auto it = std::find(header.begin(), header.end(), n);
    if (it == header.end()) throw IoError(results.string() + ": header lacks column '" + n + "' (expected file,row,code)");
    return static_cast<std::size_t>(it - header.begin());
  };
  const std::size_t cf = col("file");
  const std::size_t cr = col("row");
  const std::size_t cc = col("code");
  std::set<std::pair<std::string, std::uint64_t>> seen;
  std::size_t line_no = 1;
  while (std::getline(rin, line)) {
    ++line_no;
    if (line.empty()) continue;
    const auto c = split_csv(line);
    const std::string where = results.string() + ":" + std::to_string(line_no);
    if (c.size() <= std::max({cf, cr, cc})) {
      rep.problems.push_back(where + ": too few columns");
      continue;
    }
    std::uint64_t row = 0;
    std::uint64_t code = 0;
    try {
      row = std::stoull(c[cr]);
      code = std::stoull(c[cc], nullptr, 16);
    } catch (const std::exception&) {
      rep.problems.push_back(where + ": field 'row' or 'code' is not a number ('" + c[cr] + "', '" + c[cc] + "')");
      continue;
    }
    const auto key = std::make_pair(c[cf], row);
    const auto it = expected.find(key);
    if (it == expected.end()) {
      rep.problems.push_back(where + ": " + c[cf] + " has no row " + std::to_string(row));
      continue;
    }
    seen.insert(key);
    ++rep.checked;
    if (code != it->second.first) {
      rep.problems.push_back(c[cf] + " row " + std::to_string(row) + " field code: expected " +
                             hex(it->second.first, 1) + ", got " + hex(code, 1) + " (" + it->second.second + ")");
    }
  }
  rep.missing = expected.size() - seen.size();
  return rep;
}

}  // namespace lpemu::experiment
