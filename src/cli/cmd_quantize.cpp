// `lpemu quantize --format NAME IN OUT`: fake-quantises a tensor with a block format (or an element
// format), optionally writing the packed codes and scales and printing error statistics.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "lpemu/block/block_format.hpp"
#include "lpemu/block/pack.hpp"
#include "lpemu/block/quantize.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/hdf5.hpp"
#include "lpemu/io/output.hpp"
#include "lpemu/metrics/metrics.hpp"

namespace lpemu::cli {
namespace {

struct QuantizeArgs {
  std::string format;
  std::optional<int> axis;
  std::optional<int> block;
  std::string scale_rule;
  std::string in;
  std::string out;
  std::string packed;
  bool stats = false;
  bool json = false;
  bool force = false;
  format::ConvertOptions convert;
};

bool output_exists(const std::string& spec) {
  if (auto ref = io::parse_dataset_ref(spec)) {
    if (!std::filesystem::exists(ref->file)) return false;
    return io::H5File::open(ref->file).exists(ref->dataset);
  }
  return std::filesystem::exists(spec);
}

void print_stats(const metrics::QuantizationStats& s, bool json, const std::string& fmt, std::size_t n,
                 const std::string& out) {
  if (json) {
    print_json({{"format", fmt},
                {"elements", n},
                {"output", out},
                {"stats",
                 {{"sqnr_db", s.sqnr_db()},
                  {"mse", s.mse()},
                  {"max_abs_error", s.max_abs},
                  {"max_rel_error", s.max_rel},
                  {"clipped", s.fraction(s.clipped)},
                  {"saturated", s.fraction(s.saturated)},
                  {"flushed_to_zero", s.fraction(s.flushed)},
                  {"nonfinite_inputs", s.nonfinite_inputs},
                  {"nonfinite_outputs", s.nonfinite_outputs}}}});
    return;
  }
  std::printf("SQNR            %.4f dB\n", s.sqnr_db());
  std::printf("MSE             %.6g\n", s.mse());
  std::printf("max abs error   %.6g\n", s.max_abs);
  std::printf("max rel error   %.6g\n", s.max_rel);
  std::printf("clipped         %.6f\n", s.fraction(s.clipped));
  std::printf("saturated       %.6f\n", s.fraction(s.saturated));
  std::printf("flushed to zero %.6f\n", s.fraction(s.flushed));
  if (s.nonfinite_inputs) std::printf("non-finite inputs %zu (excluded)\n", s.nonfinite_inputs);
  if (s.nonfinite_outputs) std::printf("non-finite outputs of finite inputs %zu\n", s.nonfinite_outputs);
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

void run_quantize(Context& ctx, const QuantizeArgs& a) {
  ctx.apply_threads();
  if (output_exists(a.out) && !a.force) throw Error(a.out + ": output exists; pass --force to overwrite it");
  const io::OutputPolicy policy{a.force, {io::tensor_file(a.in)}};
  if (!a.packed.empty()) {
    io::OutputPolicy p = policy;
    p.inputs.push_back(io::tensor_file(a.out));
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
  io::Tensor t = io::read_tensor(a.in);
  if (t.shape.empty()) t.shape = {t.data.size()};
  io::Tensor q{t.shape, std::vector<float>(t.data.size())};
  std::optional<metrics::QuantizationStats> stats;
  if (bf != nullptr) {
    block::BlockOverrides ov;
    ov.axis = a.axis;
    ov.block_size = a.block;
    ov.scale_rule = a.scale_rule;
    ov.element_options = a.convert;
    const block::BlockFormat f = block::with_overrides(*bf, ov);
    block::quantize(f, t.data, q.data, t.shape);
    if (a.stats) stats = metrics::quantization_stats(f, t.data, q.data, t.shape);
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
    const format::ConvertOptions& o = a.convert;
    format::quantize(*ef, std::span<const float>(t.data), std::span<float>(q.data), o);
    if (a.stats) stats = metrics::quantization_stats(*ef, t.data, q.data);
    if (!a.packed.empty()) {
      if (ef->bits > 32) throw SpecError("--packed: element codes wider than 32 bits are not supported");
      std::vector<std::uint32_t> codes(t.data.size());
      format::encode(*ef, std::span<const float>(t.data), std::span<std::uint32_t>(codes), o);
      write_packed(a.packed, policy, ef->name, t.shape, block::pack_codes(codes, ef->bits), ef->bits, nullptr,
                   0, 1.0);
    }
  }
  io::write_tensor(a.out, q, policy);
  const std::string name = bf ? bf->name : ef->name;
  if (a.stats) {
    print_stats(*stats, a.json, name, t.data.size(), a.out);
  } else if (a.json) {
    print_json({{"format", name}, {"elements", t.data.size()}, {"output", a.out}});
  } else {
    std::cout << "quantized " << t.data.size() << " elements with " << name << " -> " << a.out << "\n";
  }
}

}  // namespace

void register_quantize(CLI::App& app, Context& ctx) {
  static QuantizeArgs args;
  auto* sub = app.add_subcommand(
      "quantize", "fake-quantize a tensor with a block format (MX, NVFP4, ...) or an element format");
  sub->add_option("--format", args.format, "block format (see formats/block) or element format")->required();
  sub->add_option("--axis", args.axis, "blocked axis (negative counts from the end); default: the format's");
  sub->add_option("--block", args.block, "block size 1..4096 along the axis; default: the format's")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--scale-rule", args.scale_rule, "ocp | ceil (rceil) | even | amax_over_max | search")
      ->check(parsed_by([](const std::string& rule) { block::parse_scale_rule(rule); }, ""));
  sub->add_flag("--stats", args.stats,
                "print SQNR, MSE, max abs/rel error, fractions clipped/saturated/flushed");
  sub->add_flag("--json", args.json, "machine-readable output");
  sub->add_option("--packed", args.packed, "also write packed codes and scales to this HDF5 file");
  sub->add_flag("--force", args.force, "overwrite OUT (and --packed FILE) if it exists");
  add_convert_options(sub, args.convert, format::Overflow::saturate);
  sub->add_option("IN", args.in, "input tensor: FILE.npy or FILE.h5:/path/dataset")->required();
  sub->add_option("OUT", args.out, "output tensor: FILE.npy or FILE.h5:/path/dataset")->required();
  sub->callback([&ctx] { run_quantize(ctx, args); });
}

}  // namespace lpemu::cli
