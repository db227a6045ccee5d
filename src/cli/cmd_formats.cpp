// `lpemu formats list`, `lpemu formats show NAME [--values]`, `lpemu encode`, `lpemu decode`.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::cli {
namespace {

std::uint64_t finite_count(const format::Format& f) {
  if (f.kind == format::Kind::integer) return f.code_mask() + 1 - (f.symmetric ? 1 : 0);
  std::uint64_t n = 0;
  const std::uint64_t codes = f.bits >= 64 ? 0 : (std::uint64_t{1} << f.bits);
  if (f.bits <= 20) {
    for (std::uint64_t c = 0; c < codes; ++c) {
      if (std::isfinite(format::decode(f, c))) ++n;
    }
    return n;
  }
  // Wide formats: count by structure (magnitudes 0..max_code per sign, one zero where -0 is NaN).
  n = (f.max_code + 1) * (f.is_signed ? 2 : 1);
  if (f.specials == format::Specials::fnuz) n -= 1;
  return n;
}

void show(const format::Format& f, const std::string& origin, bool values) {
  std::cout << "name:            " << f.name << "\n";
  if (!f.aliases.empty()) {
    std::cout << "aliases:         ";
    for (std::size_t i = 0; i < f.aliases.size(); ++i) std::cout << (i ? ", " : "") << f.aliases[i];
    std::cout << "\n";
  }
  std::cout << "defined in:      " << origin << "\n";
  if (!f.source.empty()) std::cout << "source:          " << f.source << "\n";
  std::cout << "encoding:        " << format::describe(f) << "\n";
  std::cout << "bits:            " << f.bits << "\n";
  std::cout << "max finite:      " << format_real(f.max_finite) << "\n";
  std::cout << "lowest:          " << format_real(f.lowest) << "\n";
  if (f.kind == format::Kind::floating) {
    std::cout << "min normal:      " << format_real(f.min_normal) << "  (2^" << f.emin << ")\n";
    std::cout << "min subnormal:   " << format_real(f.min_subnormal) << "\n";
    std::cout << "machine epsilon: " << format_real(std::ldexp(1.0, -f.mantissa_bits)) << "  (2^"
              << -f.mantissa_bits << ")\n";
    std::cout << "dynamic range:   " << format_real(std::log2(f.max_finite / f.min_subnormal))
              << " binades (max finite / min subnormal)\n";
  } else {
    std::cout << "step:            " << format_real(f.min_normal) << "\n";
  }
  std::cout << "finite values:   " << finite_count(f) << "\n";
  if (f.has_inf()) {
    std::cout << "+inf / -inf:     " << format::hex_code(f, f.inf_code()) << " / "
              << format::hex_code(f, f.inf_code() | f.sign_bit()) << "\n";
  }
  if (f.has_nan()) {
    std::cout << "NaN:             " << format::hex_code(f, f.nan_code());
    if (f.specials == format::Specials::fnuz) {
      std::cout << " (the only NaN; no -0)";
    } else if (f.specials == format::Specials::fn) {
      std::cout << (f.is_signed ? " and " + format::hex_code(f, f.nan_code() | f.sign_bit())
                                : std::string()) +
                       " (all-ones magnitude; no Inf)";
    } else {
      std::cout << " (canonical quiet NaN; every all-ones exponent with a non-zero mantissa is NaN)";
    }
    std::cout << "\n";
  }
  if (f.has_negative_zero()) std::cout << "-0:              " << format::hex_code(f, f.sign_bit()) << "\n";
  if (values) {
    if (f.bits > 16)
      throw Error("formats show --values: '" + f.name + "' has " + std::to_string(f.bits) +
                  "-bit codes; --values lists formats of at most 16 bits");
    std::cout << "\ncode  fielded  value\n";
    for (std::uint64_t c = 0; c <= f.code_mask(); ++c) {
      std::cout << format::hex_code(f, c) << "  " << format::fielded_binary(f, c) << "  "
                << format_real(format::decode(f, c)) << "\n";
    }
  }
}

struct ShowArgs {
  std::string name;
  bool values = false;
};

struct EncodeArgs {
  std::string name, value;
  format::ConvertOptions convert;
};

struct DecodeArgs {
  std::string name, code;
};

}  // namespace

void register_formats(CLI::App& app, Context& ctx) {
  auto* formats = app.add_subcommand("formats", "list and describe element and block formats");
  formats->require_subcommand(1);

  auto* list = formats->add_subcommand("list", "list every known element format, then every block format");
  list->callback([&ctx] {
    const auto& reg = ctx.formats();
    std::printf("%-18s %-5s %-44s %s\n", "name", "bits", "encoding", "max finite");
    for (const auto& name : reg.names()) {
      const auto& f = reg.get(name);
      std::printf("%-18s %-5d %-44s %s\n", f.name.c_str(), f.bits, format::describe(f).c_str(),
                  format_real(f.max_finite).c_str());
    }
    std::printf("\n%-22s %-16s %-16s %-20s %s\n", "block format", "element", "scale", "granularity",
                "scale rule");
    const auto& blocks = ctx.blocks();
    for (const auto& name : blocks.names()) {
      const auto& b = blocks.get(name);
      const std::string gran = block::describe_granularity(b), scale = block::describe_scale(b);
      std::printf("%-22s %-16s %-16s %-20s %s\n", b.name.c_str(), b.element.name.c_str(), scale.c_str(),
                  gran.c_str(), std::string(block::to_string(b.rule)).c_str());
    }
  });

  static ShowArgs show_args;
  auto* sh = formats->add_subcommand("show", "show one format's fields, limits and special codes");
  sh->add_option("NAME", show_args.name, "format name or alias")->required();
  sh->add_flag("--values", show_args.values, "list every code with its value (formats of at most 16 bits)");
  sh->callback([&ctx] {
    const auto& f = ctx.formats().get(show_args.name);
    show(f, ctx.formats().origin(show_args.name), show_args.values);
  });

  static EncodeArgs enc_args;
  auto* enc = app.add_subcommand("encode", "round a value to a format and print its code");
  enc->add_option("NAME", enc_args.name, "format name or alias")->required();
  enc->add_option("X", enc_args.value, "the value (decimal, hex float, inf, nan)")->required();
  add_convert_options(enc, enc_args.convert);
  enc->callback([&ctx] {
    ctx.apply_threads();
    const auto& f = ctx.formats().get(enc_args.name);
    // Read with strtod, not CLI11's strtold-then-round, so that X rounds once to the nearest double.
    const double x = parse_real(enc_args.value, "value");
    const std::uint64_t code = format::encode(f, x, enc_args.convert);
    std::cout << format::hex_code(f, code) << "  " << format::fielded_binary(f, code) << "  "
              << format_real(format::decode(f, code)) << "\n";
  });

  static DecodeArgs dec_args;
  auto* dec = app.add_subcommand("decode", "print the value of a code");
  dec->add_option("NAME", dec_args.name, "format name or alias")->required();
  dec->add_option("CODE", dec_args.code, "the code (decimal, 0x hex or 0b binary)")->required();
  dec->callback([&ctx] {
    const auto& f = ctx.formats().get(dec_args.name);
    // parse_code reads 0b binary and leading zeros as decimal, which CLI11's integers do not.
    const std::uint64_t code = parse_code(dec_args.code, "code");
    format::require_code_fits(f, code, "decode " + f.name + ": CODE = '" + dec_args.code + "'");
    std::cout << format::hex_code(f, code) << "  " << format::fielded_binary(f, code) << "  "
              << format_real(format::decode(f, code)) << "\n";
  });
}

}  // namespace lpemu::cli
