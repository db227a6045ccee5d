// `lpemu formats list`, `lpemu formats show NAME [--values]`, `lpemu encode`, `lpemu decode`: parse,
// call lpemu/app/formats.hpp, print a table or record (or --json).
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/app/formats.hpp"
#include "lpemu/format/codec.hpp"

namespace lpemu::cli {
namespace {

void print_list(const app::FormatsListResult& r) {
  std::printf("%-18s %-5s %-44s %s\n", "name", "bits", "encoding", "max finite");
  for (const auto& f : r.elements) {
    std::printf("%-18s %-5d %-44s %s\n", f.name.c_str(), f.bits, f.encoding.c_str(),
                format_real(f.max_finite).c_str());
  }
  std::printf("\n%-22s %-16s %-16s %-20s %s\n", "block format", "element", "scale", "granularity",
              "scale rule");
  for (const auto& b : r.blocks) {
    std::printf("%-22s %-16s %-16s %-20s %s\n", b.name.c_str(), b.element.c_str(), b.scale.c_str(),
                b.granularity.c_str(), b.scale_rule.c_str());
  }
}

void print_show(const app::FormatShowResult& r) {
  const format::Format& f = r.format;
  std::cout << "name:            " << f.name << "\n";
  if (!f.aliases.empty()) {
    std::cout << "aliases:         ";
    for (std::size_t i = 0; i < f.aliases.size(); ++i) std::cout << (i ? ", " : "") << f.aliases[i];
    std::cout << "\n";
  }
  std::cout << "defined in:      " << r.origin << "\n";
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
  std::cout << "finite values:   " << r.finite_values << "\n";
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
  if (!r.values.empty()) {
    std::cout << "\ncode  fielded  value\n";
    for (const auto& c : r.values)
      std::cout << c.hex << "  " << c.fielded << "  " << format_real(c.value) << "\n";
  }
}

void print_code(const app::CodeValue& c, bool json) {
  if (json) {
    print_json(app::fields(c));
    return;
  }
  std::cout << c.hex << "  " << c.fielded << "  " << format_real(c.value) << "\n";
}

struct ListArgs {
  bool json = false;
};

struct ShowArgs {
  app::FormatShowRequest req;
  bool json = false;
};

struct EncodeArgs {
  app::EncodeRequest req;
  std::string value;
  bool json = false;
};

struct DecodeArgs {
  app::DecodeRequest req;
  bool json = false;
};

}  // namespace

void register_formats(CLI::App& app, Context& ctx) {
  auto* formats = app.add_subcommand("formats", "list and describe element and block formats");
  formats->require_subcommand(1);

  static ListArgs list_args;
  auto* list = formats->add_subcommand("list", "list every known element format, then every block format");
  list->add_flag("--json", list_args.json, "print JSON instead of tables");
  list->callback([&ctx] {
    const app::FormatsListResult r = app::formats_list(ctx, {});
    if (list_args.json) {
      print_json(app::fields(r));
    } else {
      print_list(r);
    }
  });

  static ShowArgs show_args;
  auto* sh = formats->add_subcommand("show", "show one format's fields, limits and special codes");
  sh->add_option("NAME", show_args.req.name, "format name or alias")->required();
  sh->add_flag("--values", show_args.req.values,
               "list every code with its value (formats of at most 16 bits)");
  sh->add_flag("--json", show_args.json, "print JSON instead of the record");
  sh->callback([&ctx] {
    const app::FormatShowResult r = app::format_show(ctx, show_args.req);
    if (show_args.json) {
      print_json(app::fields(r));
    } else {
      print_show(r);
    }
  });

  static EncodeArgs enc_args;
  auto* enc = app.add_subcommand("encode", "round a value to a format and print its code");
  enc->add_option("NAME", enc_args.req.format, "format name or alias")->required();
  enc->add_option("X", enc_args.value, "the value (decimal, hex float, inf, nan)")->required();
  add_convert_options(enc, enc_args.req.options);
  enc->add_flag("--json", enc_args.json, "print JSON instead of a line");
  enc->callback([&ctx] {
    ctx.apply_threads();
    ctx.formats().get(enc_args.req.format);  // an unknown name is reported before a bad value
    // Read with strtod, not CLI11's strtold-then-round, so that X rounds once to the nearest double.
    enc_args.req.value = parse_real(enc_args.value, "value");
    print_code(app::encode(ctx, enc_args.req), enc_args.json);
  });

  static DecodeArgs dec_args;
  auto* dec = app.add_subcommand("decode", "print the value of a code");
  dec->add_option("NAME", dec_args.req.format, "format name or alias")->required();
  dec->add_option("CODE", dec_args.req.code, "the code (decimal, 0x hex or 0b binary)")->required();
  dec->add_flag("--json", dec_args.json, "print JSON instead of a line");
  dec->callback([&ctx] { print_code(app::decode(ctx, dec_args.req), dec_args.json); });
}

}  // namespace lpemu::cli
