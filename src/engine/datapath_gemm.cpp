// Operands enter a datapath as the plan made them: element codes, block scales along K (MX E8M0
// exponents, NVFP4 E4M3 values) handed to the datapath, and FP32 scales that do not vary along K
// (per-tensor, per-row, NVFP4's tensor scale) applied after accumulation, as cuBLASLt applies its
// scale_a / scale_b: D = fp32(fp32(s_a·s_b) · acc). Nothing is rounded a second time; an operand
// that cannot enter exactly is an error naming its format and the datapath.
#include "engine/datapath_gemm.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include <tbb/parallel_for.h>

#include "lpemu/datapath/gemm.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/format/registry.hpp"

namespace lpemu::engine {
namespace {

// True when every finite value of `from` is a value of `to` (codes enumerated up to 16 bits).
bool represents(const format::Format& to, const format::Format& from) {
  if (to.name == from.name) return true;
  if (from.bits <= 16) {
    for (std::uint64_t code = 0; code < (std::uint64_t{1} << from.bits); ++code) {
      const double v = format::decode(from, code);
      if (!std::isfinite(v)) continue;
      if (format::decode(to, format::encode(to, v)) != v) return false;
    }
    return true;
  }
  return from.kind == format::Kind::floating && to.kind == format::Kind::floating &&
         to.mantissa_bits >= from.mantissa_bits && to.emin <= from.emin &&
         to.min_subnormal <= from.min_subnormal && to.max_finite >= from.max_finite;
}

// Scale code → exponent and integer significand (value = significand · 2^exponent).
void split_scale(const block::BlockFormat& f, std::uint32_t code, std::int32_t& e, std::uint32_t& sig) {
  const double v = block::scale_value(f, code);
  sig = 1;
  e = 0;
  if (std::isnan(v)) {
    e = datapath::kNanScale;
  } else if (v == 0.0) {
    sig = 0;
  } else {
    const int m = f.scale_is_pow2 ? 0 : f.scale.mantissa_bits;
    e = std::ilogb(v) - m;
    sig = static_cast<std::uint32_t>(std::ldexp(v, -e));
  }
}

// One side of the GEMM in the datapath's terms.
struct Side {
  std::vector<std::uint64_t> codes;  // [rows, K] row-major (A) or [K, rows] (B)
  std::vector<std::uint8_t> codes8;  // the same as bytes, instead, for inputs of at most 8 bits
  std::vector<std::int32_t> exps;    // block scales along K: [rows × kb] (A) or [kb × rows] (B)
  std::vector<std::uint32_t> sigs;   // their significands (empty when all are 1)
  std::vector<float> epilogue;       // FP32 factor per row (empty = 1)
};

Side prepare(const datapath::Datapath& dp, bool a_side, const EncodedOperand& op, std::size_t rows,
             std::size_t k, std::string_view site, bool as_bytes) {
  const format::Format& in = a_side ? dp.a : dp.b;
  const block::BlockFormat* bf = op.block.get();
  if (const std::string why = datapath_entry_problem(dp, a_side, op.element, bf); !why.empty()) {
    throw Error(
        "GEMM '" + std::string(site) + "': operand " + (a_side ? "A" : "B") + " in format '" + op.format +
        "' cannot enter datapath '" + dp.name + "' exactly: " + why +
        "; quantise it to a format the datapath takes, or ask for a conversion with gemm = { datapath = \"" +
        dp.name + "\", convert = true }");
  }
  const block::BlockTensor& t = op.tensor;
  if (t.codes.size() != rows * k)
    throw ShapeError("datapath gemm: an operand encoding does not match its values");
  Side s;
  (as_bytes ? s.codes8.resize(rows * k) : s.codes.resize(rows * k));
  const bool same = in.name == op.element.name;
  // Tiles of kTile × kTile codes in parallel: B is transposed, and a tile of it writes whole
  // cache lines (kTile bytes of each of kTile columns). Each code lands in its own place, so the
  // result does not depend on the order.
  constexpr std::size_t kTile = 64;
  const std::size_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (k + kTile - 1) / kTile;
  const auto copy_tiles = [&]<typename Out, bool convert>(Out* out) {
    tbb::parallel_for(std::size_t{0}, row_tiles * col_tiles, [&](std::size_t tile) {
      const std::size_t r0 = tile / col_tiles * kTile, c0 = tile % col_tiles * kTile;
      const std::size_t r1 = std::min(rows, r0 + kTile), c1 = std::min(k, c0 + kTile);
      const std::size_t step = a_side ? 1 : rows;  // between consecutive c of one row
      for (std::size_t r = r0; r < r1; ++r) {
        const std::uint32_t* from = t.codes.data() + r * k;
        Out* to = out + (a_side ? r * k : r) + c0 * step;
        for (std::size_t c = c0; c < c1; ++c, to += step) {
          if constexpr (convert) {
            *to = static_cast<Out>(format::encode(in, format::decode(op.element, from[c])));
          } else {
            *to = static_cast<Out>(from[c]);
          }
        }
      }
    });
  };
  if (as_bytes && same) {
    copy_tiles.operator()<std::uint8_t, false>(s.codes8.data());
  } else if (as_bytes) {
    copy_tiles.operator()<std::uint8_t, true>(s.codes8.data());
  } else if (same) {
    copy_tiles.operator()<std::uint64_t, false>(s.codes.data());
  } else {
    copy_tiles.operator()<std::uint64_t, true>(s.codes.data());
  }
  if (bf == nullptr) return s;
  const float g = t.tensor_scale;
  if (bf->granularity == block::Granularity::block) {
    const std::size_t kb =
        (k + static_cast<std::size_t>(bf->block_size) - 1) / static_cast<std::size_t>(bf->block_size);
    s.exps.resize(rows * kb);
    s.sigs.resize(rows * kb);
    bool all_one = true;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t b = 0; b < kb; ++b) {
        const std::size_t at = a_side ? r * kb + b : b * rows + r;
        split_scale(*bf, t.scales[r * kb + b], s.exps[at], s.sigs[at]);
        all_one = all_one && s.sigs[at] == 1;
      }
    }
    if (all_one) s.sigs.clear();
    if (g != 1.0F) s.epilogue.assign(rows, g);
    return s;
  }
  // per_tensor / per_row: FP32 scales after accumulation.
  s.epilogue.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::uint32_t code = t.scales[bf->granularity == block::Granularity::per_tensor ? 0 : r];
    s.epilogue[r] = static_cast<float>(block::scale_value(*bf, code)) * g;
  }
  return s;
}

// Bytes of packed weight operands held at most, in all: LPEMU_PACKED_WEIGHTS_MB, or an eighth of
// physical memory; a weight is packed only while as much memory again stays available. A weight
// beyond it is packed on each GEMM instead (the same bits, slower).
std::size_t packed_budget() {
  static const std::size_t budget = [] {
    if (const char* e = std::getenv("LPEMU_PACKED_WEIGHTS_MB"); e != nullptr) {
      char* end = nullptr;
      const unsigned long long mb = std::strtoull(e, &end, 10);
      if (end == e || *end != '\0' || mb > (std::size_t{1} << 40)) {
        throw Error("LPEMU_PACKED_WEIGHTS_MB = '" + std::string(e) + "': expected a whole number of MiB");
      }
      return static_cast<std::size_t>(mb) << 20;
    }
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 8 : 0;
  }();
  return budget;
}

// Memory the system could still give (Linux: MemAvailable), or SIZE_MAX where unknown.
std::size_t memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::size_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb << 10;
  }
  return SIZE_MAX;
}

std::atomic<std::size_t> packed_held{0};

// A claim on the packed-weight budget, given back when the prepared weight goes.
struct BudgetClaim {
  std::size_t bytes = 0;
  BudgetClaim() = default;
  BudgetClaim(const BudgetClaim&) = delete;
  BudgetClaim& operator=(const BudgetClaim&) = delete;
  ~BudgetClaim() { packed_held -= bytes; }
  // Claims `n` bytes if they fit the budget and leave at least as much memory free.
  bool claim(std::size_t n) {
    if (n == 0 || n > packed_budget() || n > memory_available() / 2) return false;
    std::size_t held = packed_held.load();
    do {
      if (held + n > packed_budget()) return false;
    } while (!packed_held.compare_exchange_weak(held, held + n));
    bytes = n;
    return true;
  }
};

// A side ready for the datapath GEMM: the layout above (codes as bytes when the datapath's inputs
// are at most 8 bits wide: the byte kernel's operands); B (a weight) of the byte kernel as a
// datapath::PreparedB instead, packed for the kernels while the budget allows.
struct Prepared {
  const void* codes_at = nullptr;  // the operand's code storage this was made from
  std::size_t count = 0;
  const datapath::Datapath* dp = nullptr;
  std::string dp_name;
  Side side;
  BudgetClaim claim;
  std::unique_ptr<const datapath::PreparedB> b;
};

const std::vector<std::size_t> kNoShape;

class DatapathGemm final : public Gemm {
 public:
  explicit DatapathGemm(const datapath::Datapath& dp) : dp_(dp) {}
  const std::string& name() const override { return dp_.name; }
  const datapath::Datapath* datapath() const override { return &dp_; }
  void nt(const RowMatrix& a, const RowMatrix& b, RowMatrix& c, const GemmPoint& p) const override {
    const auto m = static_cast<std::size_t>(a.rows());
    const auto k = static_cast<std::size_t>(a.cols());
    // B held only encoded (an empty b beside its operand): [layout.shape[0], K].
    const bool b_encoded_only = p.b_operand != nullptr && b.size() == 0 && k != 0;
    if (!b_encoded_only && a.cols() != b.cols()) throw ShapeError("datapath gemm: inner dimensions differ");
    const std::vector<std::size_t>& shape = b_encoded_only ? p.b_operand->tensor.layout.shape : kNoShape;
    if (b_encoded_only && (shape.size() != 2 || shape[1] != k)) {
      throw ShapeError("datapath gemm: B's encoding is not [rows, K = " + std::to_string(k) + "]");
    }
    const std::size_t n = b_encoded_only ? shape[0] : static_cast<std::size_t>(b.rows());
    if (b_encoded_only && !p.b_operand->tensor.codes.empty() && p.b_operand->tensor.codes.size() != n * k) {
      throw ShapeError("datapath gemm: B's encoding holds " +
                       std::to_string(p.b_operand->tensor.codes.size()) +
                       " codes, not a whole number of rows of K = " + std::to_string(k) + " (" +
                       std::to_string(n) + " rows)");
    }
    if (k == 0) {  // an empty sum: every output is exactly zero (the kernels assume K > 0)
      c.setZero(a.rows(), b.rows());
      return;
    }
    const EncodedOperand ea = p.a_operand != nullptr ? EncodedOperand{} : from_values(a, p.a_format, "A", p);
    const EncodedOperand eb = p.b_operand != nullptr ? EncodedOperand{} : from_values(b, p.b_format, "B", p);
    const auto pa = make_prepared(true, p.a_operand != nullptr ? *p.a_operand : ea, m, k, p.tensor);
    // B (the weights) is prepared once per operand and kept with it, packed for the kernels.
    const auto pb = p.b_operand != nullptr ? prepared_of(*p.b_operand, n, k, p.tensor)
                                           : make_prepared(false, eb, n, k, p.tensor, false);
    const Side& sa = pa->side;
    const Side& sb = pb->side;
    datapath::GemmScales scales{sa.exps, sb.exps, sa.sigs, sb.sigs};
    c.resize(a.rows(), static_cast<Eigen::Index>(n));
    const std::span<float> out(c.data(), m * n);
    if (bytes()) {
      std::vector<std::uint32_t> d32(m * n);
      if (pb->b) {
        datapath::gemm(m, sa.codes8, *pb->b, {}, d32, scales);
      } else {
        datapath::gemm(dp_, m, n, k, sa.codes8, sb.codes8, {}, d32, scales);
      }
      if (format::fits_in_float(dp_.output())) {
        format::decode(dp_.output(), d32, out);  // bulk and exact
      } else {                                   // e.g. an int32 accumulator: its value, rounded to float
        for (std::size_t i = 0; i < m * n; ++i)
          out[i] = static_cast<float>(format::decode(dp_.output(), d32[i]));
      }
    } else {
      std::vector<std::uint64_t> d64(m * n);
      datapath::gemm(dp_, m, n, k, sa.codes, sb.codes, {}, d64, scales);
      for (std::size_t i = 0; i < m * n; ++i)
        out[i] = static_cast<float>(format::decode(dp_.output(), d64[i]));
    }
    if (sa.epilogue.empty() && sb.epilogue.empty()) return;
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        const float alpha =
            (sa.epilogue.empty() ? 1.0F : sa.epilogue[i]) * (sb.epilogue.empty() ? 1.0F : sb.epilogue[j]);
        out[i * n + j] = alpha * out[i * n + j];
      }
    }
  }

 private:
  // An operand given as values only: element codes of the format it is said to lie on (an
  // element format), or of fp32 when unquantised.
  static EncodedOperand from_values(const RowMatrix& x, std::string_view fmt, const char* side,
                                    const GemmPoint& p) {
    const format::Format* f = format::Registry::builtin().find(fmt.empty() ? std::string_view("fp32") : fmt);
    if (f == nullptr) {
      throw Error("GEMM '" + std::string(p.tensor) + "': operand " + side + " in format '" +
                  std::string(fmt) + "' reaches a datapath without its encoding (codes and scales)");
    }
    return encode_values(x, *f, "GEMM '" + std::string(p.tensor) + "' operand " + side);
  }

  // Inputs of at most 8 bits and an output of at most 32 go to the byte kernel.
  bool bytes() const { return dp_.a.bits <= 8 && dp_.b.bits <= 8 && dp_.output().bits <= 32; }

  // `keep`: B kept with its operand (a weight): a datapath::PreparedB, packed within the budget.
  std::shared_ptr<const Prepared> make_prepared(bool a_side, const EncodedOperand& op, std::size_t rows,
                                                std::size_t k, std::string_view site,
                                                bool keep = false) const {
    auto out = std::make_shared<Prepared>();
    out->codes_at = op.tensor.codes.data();
    out->count = op.tensor.codes.size();
    out->dp = &dp_;
    out->dp_name = dp_.name;
    out->side = prepare(dp_, a_side, op, rows, k, site, bytes());
    if (keep && bytes()) {
      const bool pack = out->claim.claim(datapath::PreparedB::packed_bytes(dp_, rows, k));
      out->b = std::make_unique<const datapath::PreparedB>(dp_, rows, k, std::move(out->side.codes8), pack);
      out->side.codes8 = {};
    }
    return out;
  }

  bool prepare_weight(const EncodedOperand& b, std::size_t rows, std::size_t k,
                      std::string_view site) const override {
    (void)prepared_of(b, rows, k, site);
    return true;  // the prepared form holds B's codes (and block scales) in the kernels' layout
  }

  // Codes in B's byte format (an element format that is the datapath's own B format, so entry is
  // exact by definition, and no block scales): the weight's rows are B's columns, encoded tile by
  // tile straight into the datapath::PreparedB (B's rows and its packed panels, one pass).
  bool prepare_weight8(const EncodedOperand& b, const RowCodes8& codes, std::size_t rows, std::size_t k,
                       std::string_view site) const override {
    (void)site;
    if (!bytes() || b.block != nullptr || b.element.name != dp_.b.name) return false;
    auto out = std::make_shared<Prepared>();
    out->count = rows * k;
    out->dp = &dp_;
    out->dp_name = dp_.name;
    const bool pack = out->claim.claim(datapath::PreparedB::packed_bytes(dp_, rows, k));
    out->b = std::make_unique<const datapath::PreparedB>(dp_, rows, k, codes, pack);
    const std::lock_guard<std::mutex> lock(mutex_);
    b.prepared = out;
    return true;
  }

  // B's prepared form, kept in the operand's slot (remade if the operand was copied or the slot
  // holds another datapath's; an operand whose codes were released has only this form).
  std::shared_ptr<const Prepared> prepared_of(const EncodedOperand& op, std::size_t rows, std::size_t k,
                                              std::string_view site) const {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      auto kept = std::static_pointer_cast<const Prepared>(op.prepared);
      const bool released = op.tensor.codes.empty() && rows * k != 0;
      if (kept && kept->dp == &dp_ && kept->dp_name == dp_.name &&
          (released ? kept->count == rows * k
                    : kept->codes_at == op.tensor.codes.data() && kept->count == op.tensor.codes.size())) {
        return kept;
      }
      if (released) {
        throw Error("datapath '" + dp_.name + "': GEMM '" + std::string(site) +
                    "': B's codes were released after another datapath prepared them");
      }
    }
    auto made = make_prepared(false, op, rows, k, site, true);
    const std::lock_guard<std::mutex> lock(mutex_);
    op.prepared = made;
    return made;
  }

  datapath::Datapath dp_;
  mutable std::mutex mutex_;
};

}  // namespace

std::string datapath_entry_problem(const datapath::Datapath& dp, bool a_side, const format::Format& element,
                                   const block::BlockFormat* block) {
  const format::Format& in = a_side ? dp.a : dp.b;
  if (!represents(in, element)) {
    return "its values ('" + element.name + "') are not all values of the datapath's input format '" +
           in.name + "'";
  }
  if (block == nullptr) return {};
  if (block->granularity == block::Granularity::per_tensor ||
      block->granularity == block::Granularity::per_row) {
    if (block->scale_is_pow2 || block->scale.bits > 32 || !format::fits_in_float(block->scale)) {
      return "its " + std::string(block::to_string(block->granularity)) + " scales are not FP32 values";
    }
    return {};
  }
  const bool along_k =
      block->granularity == block::Granularity::block && (block->axis == -1 || block->axis == 1);
  if (!along_k)
    return "its scales vary along K as " + std::string(block::to_string(block->granularity)) +
           " blocks, which only a block-scaled datapath with that layout can take";
  if (dp.scale_application == datapath::ScaleApplication::none || !dp.scale) {
    return "its block scales (" + block->scale_name + " per " + std::to_string(block->block_size) +
           ") need a block-scaled datapath";
  }
  if (block->block_size != dp.scale_block) {
    return "its blocks of " + std::to_string(block->block_size) + " differ from the datapath's " +
           std::to_string(dp.scale_block);
  }
  if (block->scale_is_pow2 || block->scale.name != dp.scale->name) {
    return "its block scales are " + block->scale_name + ", the datapath takes " + dp.scale->name;
  }
  return {};
}

std::string datapath_operand_problem(const datapath::Datapath& dp, bool a_side, const Quantizer* q,
                                     std::string_view role, std::string_view block_refusal) {
  const format::Format& element =
      q != nullptr ? q->element_format() : format::Registry::builtin().get("fp32");
  const block::BlockFormat* block = q != nullptr ? q->block_format() : nullptr;
  std::string why = datapath_entry_problem(dp, a_side, element, block_refusal.empty() ? block : nullptr);
  if (why.empty() && block != nullptr && !block_refusal.empty()) why = block_refusal;
  if (why.empty()) return why;
  return std::string("operand ") + (a_side ? "A" : "B") +
         (role.empty() ? "" : " (" + std::string(role) + ")") + " in format '" +
         (q != nullptr ? q->name() : std::string("fp32")) + "' cannot enter datapath '" + dp.name +
         "' exactly: " + why;
}

block::BlockFormat conversion_format(const datapath::Datapath& dp, bool a_side) {
  const format::Registry& reg = format::Registry::builtin();
  block::BlockFormat f;
  f.element = a_side ? dp.a : dp.b;
  f.element_options.overflow = format::Overflow::saturate;
  f.nonfinite = block::NonFinite::ignore;
  f.scale_overflow = block::ScaleOverflow::clamp;
  if (dp.scale_application != datapath::ScaleApplication::none && dp.scale) {
    f.scale = *dp.scale;
    f.scale_name = dp.scale->name;
    f.granularity = block::Granularity::block;
    f.block_size = dp.scale_block;
    const bool pow2 = dp.scale->mantissa_bits == 0;
    f.rule = pow2 ? block::ScaleRule::ocp : block::ScaleRule::amax_over_max;
    f.tensor_scale = pow2 ? block::TensorScale::none : block::TensorScale::fp32;
  } else {
    f.scale = reg.get("fp32");
    f.scale_name = "fp32";
    f.granularity = block::Granularity::per_tensor;
    f.rule = block::ScaleRule::amax_over_max;
  }
  f.name = dp.name + (a_side ? ".a" : ".b");
  f.source = "conversion to the inputs of datapath " + dp.name;
  f.validate();
  return f;
}

EncodedOperand operand_from_codes(const Quantizer& q, const RowMatrix& codes,
                                  std::span<const float> scale_codes, float tensor_scale, RowMatrix& values,
                                  std::string_view what) {
  const format::Format& el = q.element_format();
  const std::string w(what);
  const auto code_of = [&](float v, const format::Format& f, const char* kind, std::size_t i) {
    if (!(v >= 0.0F) || v != std::floor(v) || static_cast<double>(v) > static_cast<double>(f.code_mask())) {
      throw Error(w + ": " + kind + " " + std::to_string(i) + " = " + std::to_string(v) +
                  ": expected a code of '" + f.name + "' (an integer in 0.." + std::to_string(f.code_mask()) +
                  ")");
    }
    return static_cast<std::uint32_t>(v);
  };
  if (el.bits > 32) throw Error(w + ": '" + el.name + "' codes are wider than 32 bits");
  const auto n = static_cast<std::size_t>(codes.size());
  EncodedOperand e;
  e.format = q.name();
  e.element = el;
  values.resize(codes.rows(), codes.cols());
  const block::BlockFormat* bf = q.block_format();
  if (bf == nullptr) {
    if (!scale_codes.empty() || tensor_scale != 1.0F)
      throw Error(w + ": element format '" + el.name + "' has no scales");
    std::vector<std::uint32_t> c(n);
    for (std::size_t i = 0; i < n; ++i) c[i] = code_of(codes.data()[i], el, "code", i);
    for (std::size_t i = 0; i < n; ++i) values.data()[i] = static_cast<float>(format::decode(el, c[i]));
    e = encode_values(values, el, what);
    e.format = q.name();
    return e;
  }
  e.block = std::make_shared<const block::BlockFormat>(*bf);
  const std::size_t shape[2] = {static_cast<std::size_t>(codes.rows()),
                                static_cast<std::size_t>(codes.cols())};
  e.tensor.format_name = bf->name;
  e.tensor.layout = block::make_layout(*bf, shape);
  e.tensor.tensor_scale = tensor_scale;
  if (scale_codes.size() != e.tensor.layout.block_count()) {
    throw Error(w + ": " + std::to_string(scale_codes.size()) + " scale codes given, expected " +
                std::to_string(e.tensor.layout.block_count()) + " (one per block of '" + bf->name + "')");
  }
  e.tensor.codes.resize(n);
  for (std::size_t i = 0; i < n; ++i) e.tensor.codes[i] = code_of(codes.data()[i], el, "code", i);
  for (const float s : scale_codes) {
    if (bf->scale_is_pow2) {
      e.tensor.scales.push_back(static_cast<std::uint32_t>(static_cast<std::int32_t>(s)));
    } else {
      e.tensor.scales.push_back(code_of(s, bf->scale, "scale", e.tensor.scales.size()));
    }
  }
  block::decode(*bf, e.tensor, std::span<float>(values.data(), n));
  return e;
}

RowMatrix gemm_operands(const Gemm& g, RowMatrix a, RowMatrix b, const Quantizer* qa, const Quantizer* qb,
                        const EncodedOperand* ea, const EncodedOperand* eb) {
  if (a.cols() != b.cols()) {
    throw ShapeError("gemm: A is [" + std::to_string(a.rows()) + ", " + std::to_string(a.cols()) +
                     "] but B is [" + std::to_string(b.rows()) + ", " + std::to_string(b.cols()) +
                     "]: both need K columns");
  }
  QuantPoint p;
  p.axis = 1;
  const auto make = [&](const Quantizer* q, RowMatrix& x, const EncodedOperand* given, const char* side) {
    if (given != nullptr) return *given;
    if (q == nullptr)
      return encode_values(x, format::Registry::builtin().get("fp32"), std::string("gemm operand ") + side);
    p.tensor = side;
    return q->encode(x, p);
  };
  const EncodedOperand oa = make(qa, a, ea, "A");
  const EncodedOperand ob = make(qb, b, eb, "B");
  GemmPoint gp{-1, LayerKind::head, "gemm", oa.format, ob.format};
  gp.a_operand = &oa;
  gp.b_operand = &ob;
  RowMatrix c;
  g.nt(a, b, c, gp);
  return c;
}

namespace detail {
std::shared_ptr<const Gemm> make_datapath_gemm(const datapath::Datapath& dp) {
  return std::make_shared<const DatapathGemm>(dp);
}
}  // namespace detail

}  // namespace lpemu::engine
