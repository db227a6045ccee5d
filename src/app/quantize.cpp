#include "lpemu/app/quantize.hpp"

#include <filesystem>
#include <vector>

#include "lpemu/app/options.hpp"
#include "lpemu/block/block_format.hpp"
#include "lpemu/block/pack.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/hdf5.hpp"
#include "lpemu/io/output.hpp"

namespace lpemu::app {
namespace {

bool output_exists(const std::string& spec) {
  if (auto ref = io::parse_dataset_ref(spec)) {
    if (!std::filesystem::exists(ref->file)) return false;
    return io::H5File::open(ref->file).exists(ref->dataset);
  }
  return std::filesystem::exists(spec);
}

void write_packed(const std::string& file, const io::OutputPolicy& policy, const std::string& fmt_name,
                  const std::vector<std::size_t>& shape, const std::vector<std::uint8_t>& codes,
                  int code_bits, const std::vector<std::uint8_t>* scales, int scale_bits,
                  double tensor_scale) {
  io::write_h5_atomic(file, policy, false, [&](io::H5File& h) {
    h.write_bytes("/codes", {codes.size()}, codes.data());
    std::vector<std::int64_t> sh(shape.begin(), shape.end());
    h.write_ints("/shape", {sh.size()}, sh.data());
    h.set_attr("/", "format", fmt_name);
    h.set_attr("/", "code_bits", static_cast<std::int64_t>(code_bits));
    h.set_attr("/", "layout",
               std::string("codes: little-endian bit stream, code i at bits [i*b, (i+1)*b), row-major "
                           "tensor order; scales: same packing, one per block in block order"));
    if (scales != nullptr) {
      h.write_bytes("/scales", {scales->size()}, scales->data());
      h.set_attr("/", "scale_bits", static_cast<std::int64_t>(scale_bits));
      h.set_attr("/", "tensor_scale", tensor_scale);
    }
  });
}

}  // namespace

QuantizeResult quantize(experiment::Context& ctx, const QuantizeRequest& a) {
  if (output_exists(a.output) && !a.force)
    throw IoError(a.output + ": output exists; pass --force to overwrite it");
  const io::OutputPolicy policy{a.force, {io::tensor_file(a.input)}, {a.input}};
  if (!a.packed.empty()) {
    io::OutputPolicy p = policy;
    p.inputs.push_back(io::tensor_file(a.output));
    io::check_output(a.packed, p);
  }
  const format::Registry& elements = ctx.formats();
  const block::BlockRegistry& blocks = ctx.blocks();
  const block::BlockFormat* bf = blocks.find(a.format);
  const format::Format* ef = bf ? nullptr : elements.find(a.format);
  if (bf == nullptr && ef == nullptr) {
    std::vector<std::string> all = blocks.names();
    for (const auto& n : elements.names()) all.push_back(n);
    throw UnknownNameError("unknown format '" + a.format + "' (neither a block nor an element format)" +
                           lpemu::detail::closest_names_hint(a.format, all));
  }
  io::Tensor t = io::read_tensor(a.input);
  if (t.shape.empty()) t.shape = {t.data.size()};
  io::Tensor q{t.shape, std::vector<float>(t.data.size())};
  QuantizeResult r;
  if (bf != nullptr) {
    block::BlockOverrides ov;
    ov.axis = a.axis;
    ov.block_size = a.block;
    ov.scale_rule = a.scale_rule;
    ov.element_options = a.options;
    const block::BlockFormat f = block::with_overrides(*bf, ov);
    block::quantize(f, t.data, q.data, t.shape);
    if (a.stats) r.stats = metrics::quantization_stats(f, t.data, q.data, t.shape);
    if (!a.packed.empty()) {
      const block::BlockTensor enc = block::encode(f, t.data, t.shape);
      const int sbits = f.scale_is_pow2 ? 32 : f.scale.bits;
      const auto sc = block::pack_codes(enc.scales, sbits);
      write_packed(a.packed, policy, f.name, t.shape, block::pack_codes(enc.codes, f.element.bits),
                   f.element.bits, &sc, sbits, static_cast<double>(enc.tensor_scale));
    }
  } else {
    if (a.block || a.axis || !a.scale_rule.empty()) {
      throw SpecError("--block, --axis and --scale-rule need a block format; '" + a.format +
                      "' is an element format");
    }
    const format::ConvertOptions& o = a.options;
    format::quantize(*ef, std::span<const float>(t.data), std::span<float>(q.data), o);
    if (a.stats) r.stats = metrics::quantization_stats(*ef, t.data, q.data);
    if (!a.packed.empty()) {
      if (ef->bits > 32) throw SpecError("--packed: element codes wider than 32 bits are not supported");
      std::vector<std::uint32_t> codes(t.data.size());
      format::encode(*ef, std::span<const float>(t.data), std::span<std::uint32_t>(codes), o);
      write_packed(a.packed, policy, ef->name, t.shape, block::pack_codes(codes, ef->bits), ef->bits, nullptr,
                   0, 1.0);
    }
  }
  io::write_tensor(a.output, q, policy);
  r.format = bf ? bf->name : ef->name;
  r.elements = t.data.size();
  r.output = a.output;
  r.packed = a.packed;
  return r;
}

Fields fields(const QuantizeResult& r) {
  Fields f = {{"format", r.format}, {"elements", r.elements}, {"output", r.output}};
  if (!r.packed.empty()) f["packed"] = r.packed;
  if (r.stats) {
    const metrics::QuantizationStats& s = *r.stats;
    f["stats"] = {{"sqnr_db", s.sqnr_db()},
                  {"mse", s.mse()},
                  {"max_abs_error", s.max_abs},
                  {"max_rel_error", s.max_rel},
                  {"clipped", s.fraction(s.clipped)},
                  {"saturated", s.fraction(s.saturated)},
                  {"flushed_to_zero", s.fraction(s.flushed)},
                  {"nonfinite_inputs", s.nonfinite_inputs},
                  {"nonfinite_outputs", s.nonfinite_outputs}};
  }
  return f;
}

QuantizeRequest quantize_request(const Fields& f) {
  QuantizeRequest r;
  FieldReader in(f, "quantize");
  in.read("format", r.format);
  in.read("axis", r.axis);
  in.read("block", r.block);
  in.read("scale_rule", r.scale_rule);
  in.read("input", r.input);
  in.read("output", r.output);
  in.read("packed", r.packed);
  in.read("stats", r.stats);
  in.read("force", r.force);
  read_convert_options(in, r.options);
  in.finish();
  if (r.format.empty()) throw SpecError("quantize: format (a block or element format) is required");
  if (r.input.empty() || r.output.empty())
    throw SpecError("quantize: input and output (FILE.npy or FILE.h5:/dataset) are required");
  if (r.block && (*r.block < 1 || *r.block > 4096))
    throw SpecError("quantize: block = " + std::to_string(*r.block) + ": expected 1..4096");
  if (!r.scale_rule.empty()) block::parse_scale_rule(r.scale_rule);
  return r;
}

}  // namespace lpemu::app
