#include "lpemu/app/formats.hpp"

#include <cmath>

#include "lpemu/app/options.hpp"
#include "lpemu/block/block_format.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::app {
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

CodeValue code_value(const format::Format& f, std::uint64_t code) {
  return {f.name, code, format::hex_code(f, code), format::fielded_binary(f, code), format::decode(f, code)};
}

}  // namespace

FormatsListResult formats_list(experiment::Context& ctx, const FormatsListRequest& /*request*/) {
  FormatsListResult r;
  const auto& reg = ctx.formats();
  for (const auto& name : reg.names()) {
    const auto& f = reg.get(name);
    r.elements.push_back({f.name, f.bits, format::describe(f), f.max_finite});
  }
  const auto& blocks = ctx.blocks();
  for (const auto& name : blocks.names()) {
    const auto& b = blocks.get(name);
    r.blocks.push_back({b.name, b.element.name, block::describe_scale(b), block::describe_granularity(b),
                        std::string(block::to_string(b.rule))});
  }
  return r;
}

Fields fields(const FormatsListResult& r) {
  Fields el = Fields::array(), bl = Fields::array();
  for (const auto& e : r.elements)
    el.push_back(
        {{"name", e.name}, {"bits", e.bits}, {"encoding", e.encoding}, {"max_finite", e.max_finite}});
  for (const auto& b : r.blocks) {
    bl.push_back({{"name", b.name},
                  {"element", b.element},
                  {"scale", b.scale},
                  {"granularity", b.granularity},
                  {"scale_rule", b.scale_rule}});
  }
  return {{"elements", el}, {"blocks", bl}};
}

FormatsListRequest formats_list_request(const Fields& f) {
  FieldReader(f, "formats list").finish();
  return {};
}

FormatShowResult format_show(experiment::Context& ctx, const FormatShowRequest& a) {
  FormatShowResult r;
  r.format = ctx.formats().get(a.name);
  r.origin = ctx.formats().origin(a.name);
  const format::Format& f = r.format;
  if (a.values) {
    if (f.bits > 16)
      throw SpecError("formats show --values: '" + f.name + "' has " + std::to_string(f.bits) +
                      "-bit codes; --values lists formats of at most 16 bits");
    for (std::uint64_t c = 0; c <= f.code_mask(); ++c) r.values.push_back(code_value(f, c));
  }
  r.finite_values = finite_count(f);
  return r;
}

Fields fields(const FormatShowResult& r) {
  const format::Format& f = r.format;
  Fields out = {{"name", f.name},
                {"aliases", f.aliases},
                {"defined_in", r.origin},
                {"source", f.source},
                {"encoding", format::describe(f)},
                {"bits", f.bits},
                {"max_finite", f.max_finite},
                {"lowest", f.lowest}};
  if (f.kind == format::Kind::floating) {
    out["min_normal"] = f.min_normal;
    out["emin"] = f.emin;
    out["min_subnormal"] = f.min_subnormal;
    out["machine_epsilon"] = std::ldexp(1.0, -f.mantissa_bits);
    out["dynamic_range_binades"] = std::log2(f.max_finite / f.min_subnormal);
  } else {
    out["step"] = f.min_normal;
  }
  out["finite_values"] = r.finite_values;
  if (f.has_inf()) {
    out["inf"] = {{"positive", format::hex_code(f, f.inf_code())},
                  {"negative", format::hex_code(f, f.inf_code() | f.sign_bit())}};
  }
  if (f.has_nan()) {
    Fields nan = Fields::array({format::hex_code(f, f.nan_code())});
    if (f.specials == format::Specials::fn && f.is_signed)
      nan.push_back(format::hex_code(f, f.nan_code() | f.sign_bit()));
    out["nan"] = nan;
  }
  if (f.has_negative_zero()) out["negative_zero"] = format::hex_code(f, f.sign_bit());
  if (!r.values.empty()) {
    Fields v = Fields::array();
    for (const auto& c : r.values) v.push_back({{"code", c.hex}, {"fielded", c.fielded}, {"value", c.value}});
    out["values"] = v;
  }
  return out;
}

FormatShowRequest format_show_request(const Fields& f) {
  FormatShowRequest r;
  FieldReader in(f, "formats show");
  in.read("name", r.name);
  in.read("values", r.values);
  in.finish();
  if (r.name.empty()) throw SpecError("formats show: name (a format name or alias) is required");
  return r;
}

CodeValue encode(experiment::Context& ctx, const EncodeRequest& a) {
  const auto& f = ctx.formats().get(a.format);
  format::validate(a.options);
  return code_value(f, format::encode(f, a.value, a.options));
}

EncodeRequest encode_request(const Fields& f) {
  EncodeRequest r;
  FieldReader in(f, "encode");
  in.read("format", r.format);
  in.read("value", r.value);
  read_convert_options(in, r.options);
  in.finish();
  if (r.format.empty()) throw SpecError("encode: format (a format name or alias) is required");
  if (!f.contains("value")) throw SpecError("encode: value (a real number) is required");
  return r;
}

CodeValue decode(experiment::Context& ctx, const DecodeRequest& a) {
  const auto& f = ctx.formats().get(a.format);
  // io::parse_unsigned reads 0b binary and leading zeros as decimal.
  const auto code = io::parse_unsigned(a.code);
  if (!code)
    throw SpecError("code '" + a.code +
                    "': expected an unsigned integer code (decimal, 0x hex or 0b binary)");
  format::require_code_fits(f, *code, "decode " + f.name + ": CODE = '" + a.code + "'");
  return code_value(f, *code);
}

DecodeRequest decode_request(const Fields& f) {
  Fields g = f;
  if (g.is_object() && g.contains("code") && g["code"].is_number_integer() && !g["code"].is_boolean() &&
      (g["code"].is_number_unsigned() || g["code"].get<long long>() >= 0))
    g["code"] = std::to_string(g["code"].get<std::uint64_t>());
  DecodeRequest r;
  FieldReader in(g, "decode");
  in.read("format", r.format);
  in.read("code", r.code);
  in.finish();
  if (r.format.empty()) throw SpecError("decode: format (a format name or alias) is required");
  if (r.code.empty()) throw SpecError("decode: code (an unsigned integer) is required");
  return r;
}

Fields fields(const CodeValue& c) {
  return {{"format", c.format}, {"code", c.code}, {"hex", c.hex}, {"fielded", c.fielded}, {"value", c.value}};
}

}  // namespace lpemu::app
