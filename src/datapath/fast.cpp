// Fast GEMM kernels. Same algorithm as the block engine (docs/tensor-core-model.md), specialised for
// exact products of narrow inputs, truncating alignment with c fused, sequential chaining,
// deterministic rounding; and for `exact` alignment over all of K (ideal). Operands are packed
// straight from the caller's codes into signed significands and exponents (B in panels of 16
// columns for the Highway row kernel rows_trunc in fast_rows.cpp, which sums each block in float
// where that is exact; elsewhere int32 or int64).
#include "datapath/fast.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include <tbb/blocked_range2d.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include "datapath/fast_rows.hpp"

namespace lpemu::datapath::detail {
namespace {

constexpr std::size_t kScratchKept = std::size_t{64} << 20;  // bytes of scratch a thread keeps

// Scratch memory for one GEMM's packed operands, uninitialised (every element is written before
// it is read). Taken from a per-thread arena kept between GEMMs, so that the repeated GEMMs of a
// model's layers do not fault fresh pages in on every call (up to kScratchKept bytes stay with
// the thread); a GEMM started while its thread's arena is in use (a nested call from a task the
// thread picked up while waiting) allocates its own. Not shared between threads.
class Scratch {
 public:
  /// Memory from the thread's arena when `kept` and the arena is free, else allocated for this Scratch.
  explicit Scratch(bool kept = true) : arena_(!kept || arena().busy ? nullptr : &arena()) {
    if (arena_ != nullptr) arena_->busy = true;
  }
  ~Scratch() {
    if (arena_ != nullptr) arena_->release();
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  /// Room for n values of T (null for none).
  template <typename T>
  T* take(std::size_t n) {
    static_assert(std::is_trivial_v<T>);
    return n == 0 ? nullptr : reinterpret_cast<T*>(bytes(n * sizeof(T)));
  }

  /// The memory allocated for this Scratch (not the arena's), handed over with its size in bytes.
  std::vector<std::unique_ptr<std::byte[]>> release(std::size_t& size) {
    size = own_bytes_;
    own_bytes_ = 0;
    return std::move(own_);
  }

 private:
  struct Block {
    std::unique_ptr<std::byte[]> data;
    std::size_t size = 0;
  };
  struct Arena {
    std::vector<Block> blocks;  // handed out in order; a GEMM of the same shape reuses each
    std::size_t next = 0;
    bool busy = false;
    void release() {
      std::size_t kept = 0;
      for (Block& b : blocks) {
        if (kept + b.size > kScratchKept) b = Block{};
        kept += b.size;
      }
      next = 0;
      busy = false;
    }
  };
  static Arena& arena() {
    thread_local Arena a;
    return a;
  }
  std::byte* bytes(std::size_t n) {
    if (arena_ == nullptr) {
      own_bytes_ += n;
      return own_.emplace_back(std::make_unique_for_overwrite<std::byte[]>(n)).get();
    }
    if (arena_->next == arena_->blocks.size()) arena_->blocks.emplace_back();
    Block& b = arena_->blocks[arena_->next++];
    if (b.size < n) {
      b.data.reset();
      b.data = std::make_unique_for_overwrite<std::byte[]>(n);
      b.size = n;
    }
    return b.data.get();
  }

  Arena* arena_;
  std::vector<std::unique_ptr<std::byte[]>> own_;
  std::size_t own_bytes_ = 0;
};

// An operand's arrays, [rows][k]; arrays a GEMM does not read are not made (null).
struct Packed {
  float* v = nullptr;         // value as a float (0 for zero, NaN and Inf; exact where rows_trunc runs)
  std::int32_t* m = nullptr;  // signed significand (0 for zero)
  std::int32_t* e = nullptr;  // alignment exponent (kZeroExp for zero)
  std::int32_t* l = nullptr;  // lsb exponent (ideal only)
  std::int8_t* e8 = nullptr;  // alignment exponent in rows_trunc's 8-bit layout, [rows][k8]
  std::vector<char> special;  // per row: holds NaN or Inf
};

// One operand reduced to what the kernels read.
struct Lane {
  float v = 0;                // value as a float (0 for zero, NaN and Inf)
  std::int32_t m = 0;         // signed significand (0 for zero, NaN and Inf)
  std::int32_t e = kZeroExp;  // alignment exponent (kZeroExp for zero, NaN and Inf)
  std::int32_t l = 0;         // lsb exponent
  bool special = false;       // NaN or Inf
};

Lane lane_of(const Operand& o) {
  Lane x;
  if (o.kind == Kind::finite) {
    x.m = o.neg ? -static_cast<std::int32_t>(o.mag) : static_cast<std::int32_t>(o.mag);
    x.e = o.e;
    x.l = o.lsb;
    x.v = static_cast<float>(std::ldexp(static_cast<double>(x.m), o.lsb));
  }
  x.special = o.kind == Kind::nan || o.kind == Kind::inf;
  return x;
}

// An alignment exponent in 8-bit lanes (rows_trunc_applies bounds the finite ones).
std::int8_t exp8(std::int32_t e) { return e == kZeroExp ? kZeroExp8 : static_cast<std::int8_t>(e); }

// Decodes and checks codes of one operand format (tables for codes of up to 8 bits), so the
// fast path packs straight from the caller's codes: no matrix of Operands.
class Decoder {
 public:
  Decoder(const format::Format& f, bool flush, const char* what)
      : f_(f), flush_(flush), what_(what), wide_(~f.code_mask()) {
    if (f.bits <= 8) {
      table_.resize(std::size_t{1} << f.bits);
      lanes_.resize(table_.size());
      for (std::uint64_t code = 0; code < table_.size(); ++code) {
        table_[code] = decode_operand(f, code, flush);
        lanes_[code] = lane_of(table_[code]);
      }
      values_.resize(table_.size());
      exp8_.resize(table_.size());
      special_.resize(table_.size());
      for (std::size_t code = 0; code < table_.size(); ++code) {
        values_[code] = lanes_[code].v;
        exp8_[code] = exp8(lanes_[code].e);
        special_[code] = lanes_[code].special ? 1 : 0;
      }
    }
  }

  /// One row of a vector-kernel panel from kPanel codes: values v[l], 8-bit exponents e[l·stride],
  /// NaN/Inf flags or-ed into special[l]; false (nothing written) without tables (formats over 8
  /// bits) or for a code wider than the format (lane() then names it).
  template <typename In>
  bool panel_row(const In* codes, float* v, std::int8_t* e, std::size_t stride, bool* special) const {
    if (values_.empty()) return false;
    std::uint64_t any = 0;
    for (std::size_t l = 0; l < kPanel; ++l) any |= codes[l];
    if ((any & wide_) != 0) return false;
    const float* values = values_.data();  // locals: the stores below may not alias them
    const std::int8_t* exps = exp8_.data();
    const std::uint8_t* specials = special_.data();
    for (std::size_t l = 0; l < kPanel; ++l) {
      const auto code = static_cast<std::size_t>(codes[l]);
      v[l] = values[code];
      e[l * stride] = exps[code];
      special[l] = special[l] || specials[code] != 0;
    }
    return true;
  }

  /// True if codes decode through tables (formats of up to 8 bits); then the three below are set.
  bool tables() const { return !values_.empty(); }
  /// Per code: its value, 8-bit alignment exponent and NaN/Inf flag (as panel_row writes them).
  const float* values() const { return values_.data(); }
  const std::int8_t* exps() const { return exp8_.data(); }
  const std::uint8_t* specials() const { return special_.data(); }
  /// Bits set in a code wider than the format.
  std::uint64_t wide() const { return wide_; }

  /// The operand of `code`; throws ShapeError naming `what` and `index` for a code wider than the format.
  Operand operator()(std::uint64_t code, std::size_t index) const {
    check(code, index);
    return table_.empty() ? decode_operand(f_, code, flush_) : table_[code];
  }

  /// lane_of the operand of `code`, checked as operator() does.
  Lane lane(std::uint64_t code, std::size_t index) const {
    check(code, index);
    return lanes_.empty() ? lane_of(decode_operand(f_, code, flush_)) : lanes_[code];
  }

 private:
  void check(std::uint64_t code, std::size_t index) const {
    if ((code & wide_) != 0) require_operand_fits(f_, code, what_, index);
  }

  const format::Format& f_;
  bool flush_;
  const char* what_;
  std::uint64_t wide_;
  std::vector<Operand> table_;
  std::vector<Lane> lanes_;
  // lanes_ as the vector kernel's panels hold them (values, 8-bit exponents, NaN/Inf).
  std::vector<float> values_;
  std::vector<std::int8_t> exp8_;
  std::vector<std::uint8_t> special_;
};

// Stores `x` at `j` of p's arrays; true if it is NaN or Inf.
[[gnu::always_inline]] inline bool put(Packed& p, std::size_t j, const Lane& x) {
  if (p.v != nullptr) p.v[j] = x.v;
  if (p.m != nullptr) p.m[j] = x.m;
  if (p.e != nullptr) p.e[j] = x.e;
  if (p.l != nullptr) p.l[j] = x.l;
  return x.special;
}

// Packed arrays for rows × k operands in `s`, those asked for: values as floats, significands,
// alignment exponents, lsb exponents, and 8-bit exponents ([rows][k8], padding kZeroExp8).
Packed make_packed(Scratch& s, std::size_t rows, std::size_t k, bool with_v, bool with_m, bool with_e,
                   bool with_l, std::size_t k8) {
  Packed p;
  if (with_v) p.v = s.take<float>(rows * k);
  if (with_m) p.m = s.take<std::int32_t>(rows * k);
  if (with_e) p.e = s.take<std::int32_t>(rows * k);
  if (with_l) p.l = s.take<std::int32_t>(rows * k);
  if (k8 > 0) {
    p.e8 = s.take<std::int8_t>(rows * k8);
    if (k8 != k) std::fill_n(p.e8, rows * k8, kZeroExp8);
  }
  p.special.assign(rows, 0);
  return p;
}

constexpr std::size_t kFusedRows = 16;  // up to this many rows, B's panels are packed where used
constexpr std::size_t kPackAhead = 16;  // rows of B fetched ahead of packing
constexpr std::size_t kRowBlock = 64;  // rows of A that meet each panel of B in turn (a multiple of kRowTile)

bool narrow(const format::Format& f) { return f.kind == format::Kind::floating && f.mantissa_bits <= 10; }

}  // namespace

constexpr std::size_t kColumnBlock = 64;  // B's columns per tile of fast_prepare_b from columns

// rows [h][k] (h ≤ kColumnBlock) transposed into cols [k][kColumnBlock] (cols[p·kColumnBlock + i] =
// rows[i·k + p]; entries i ≥ h unset): eight codes of a row per load, each to its own row of cols.
void transpose_block(const std::uint8_t* rows, std::size_t h, std::size_t k, std::uint8_t* cols) {
  std::size_t p = 0;
  if constexpr (std::endian::native == std::endian::little) {
    for (; p + 8 <= k; p += 8) {
      std::uint8_t* to = cols + p * kColumnBlock;
      for (std::size_t i = 0; i < h; ++i) {
        std::uint64_t w = 0;
        std::memcpy(&w, rows + i * k + p, sizeof w);
        for (std::size_t j = 0; j < 8; ++j)
          to[j * kColumnBlock + i] = static_cast<std::uint8_t>(w >> (8 * j));
      }
    }
  }
  for (; p < k; ++p) {
    for (std::size_t i = 0; i < h; ++i) cols[p * kColumnBlock + i] = rows[i * k + p];
  }
}

// B packed once (fast_prepare_b): what prepare_b makes, in memory of its own.
struct FastB {
  std::size_t n = 0, k = 0;
  float* bvk = nullptr;
  std::int8_t* bek = nullptr;
  Packed pb;
  std::vector<char> bspecial;
  std::vector<std::unique_ptr<std::byte[]>> memory;
  std::size_t bytes = 0;
};

bool fast_gemm_applicable(const Datapath& dp, bool no_scales) {
  if (!no_scales || dp.scale_application != ScaleApplication::none || dp.product_format ||
      dp.promote_every > 0 || dp.order != Order::sequential || dp.addend != Addend::fused ||
      dp.flush_subnormal_inputs || dp.accumulator_rounding.mode == format::RoundingMode::stochastic ||
      dp.accumulator.kind != format::Kind::floating || dp.accumulator.specials != format::Specials::ieee ||
      !narrow(dp.a) || !narrow(dp.b)) {
    return false;
  }
  if (dp.alignment == Alignment::truncate) {
    // Left shifts of products are at most F − m_a − m_b, which kLift must cover.
    return !dp.sticky && dp.fused_terms >= 1 && dp.fused_terms <= 64 && dp.fraction_bits <= 36 &&
           dp.fraction_bits - dp.a.mantissa_bits - dp.b.mantissa_bits <= kLift;
  }
  if (dp.alignment == Alignment::exact) {
    // int64 fixed point at the smallest product lsb: products span at most this many bits.
    const int span = (dp.a.emax - dp.a.emin + dp.a.mantissa_bits + 1) +
                     (dp.b.emax - dp.b.emin + dp.b.mantissa_bits + 1) + 2;
    return dp.fused_terms == 0 && span <= 40;
  }
  return false;
}

namespace {

// One fast GEMM, D = C + A·B on codes, in named steps: plan (kernel parameters), prepare_a and
// prepare_b (operands packed from the codes), the tile kernel on rows without NaN or Inf
// (run_fused_panels, tile_rows) and per-element accumulation and output for the rest
// (scalar_rows, element); whatever a kernel cannot decide goes to the general engine (general).
template <typename In, typename Acc>
class GemmRun {
 public:
  /// `pre`: B already packed by fast_prepare_b (from the same codes b, under the same datapath).
  GemmRun(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k, std::span<const In> a,
          std::span<const In> b, std::span<const Acc> c, std::span<Acc> d, const FastB* pre = nullptr)
      : dp_(dp),
        m_(m),
        n_(n),
        k_(k),
        a_(a),
        b_(b),
        c_(c),
        d_(d),
        dec_a_(dp.a, dp.flush_subnormal_inputs, "A"),
        dec_b_(dp.b, dp.flush_subnormal_inputs, "B"),
        pre_(pre),
        scratch_(m > 0) {}

  /// Bytes pack_b() would allocate.
  std::size_t packed_b_size() {
    if (!plan()) return 0;
    const std::size_t scalar_arrays = exact_ ? 3 : 2;  // significands, exponents (, lsb exponents)
    return panels_ * kPanel * (k_ * sizeof(float) + k8_) +
           (n_ - jt_) * k_ * sizeof(std::int32_t) * scalar_arrays + n_;
  }

  /// The packed B prepared last, moved into memory of its own.
  std::unique_ptr<FastB> take_packed_b() {
    auto out = std::make_unique<FastB>();
    out->n = n_;
    out->k = k_;
    out->bvk = bvk_;
    out->bek = bek_;
    out->pb = std::move(pb_);
    out->bspecial = std::move(bspecial_own_);
    out->memory = scratch_.release(out->bytes);
    out->bytes += out->bspecial.size();
    return out;
  }

  /// B packed as run() reads it, in memory of its own; null when no kernel reads packed B.
  std::unique_ptr<FastB> pack_b() {
    if (!plan()) return nullptr;
    fused_ = false;
    prepare_b();
    return take_packed_b();
  }

  /// B's codes written to `codes` ([k×n]) from its columns, kColumnBlock at a time into a tile
  /// transposed in cache, then stored into B's rows and (when `pack`) packed from the tile as
  /// pack_b() packs them: one pass. The packed B, or null when not packed.
  std::unique_ptr<FastB> pack_b_columns(
      const std::function<void(std::size_t, std::size_t, std::uint8_t*)>& columns, std::uint8_t* codes,
      bool pack) {
    const bool packing = pack && plan();
    fused_ = false;
    bspecial_own_.assign(n_, 0);
    bspecial_ = bspecial_own_.data();
    const std::size_t panel_floats = packing ? panels_ * k_ * kPanel : 0;
    bvk_ = scratch_.take<float>(panel_floats);
    bek_ = scratch_.take<std::int8_t>(packing ? panels_ * k8_ * kPanel : 0);
    struct Tiles {
      std::unique_ptr<std::uint8_t[]> rows, cols;  // [kColumnBlock][k] as written, [k][kColumnBlock]
    };
    tbb::enumerable_thread_specific<Tiles> tiles([this] {
      return Tiles{std::make_unique_for_overwrite<std::uint8_t[]>(kColumnBlock * k_),
                   std::make_unique_for_overwrite<std::uint8_t[]>(kColumnBlock * k_)};
    });
    const std::size_t blocks = (n_ + kColumnBlock - 1) / kColumnBlock;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, blocks), [&](const auto& r) {
      Tiles& t = tiles.local();
      for (std::size_t blk = r.begin(); blk != r.end(); ++blk) {
        const std::size_t j0 = blk * kColumnBlock, h = std::min(kColumnBlock, n_ - j0);
        columns(j0, h, t.rows.get());
        transpose_block(t.rows.get(), h, k_, t.cols.get());
        for (std::size_t p = 0; p < k_; ++p) {
          std::memcpy(codes + p * n_ + j0, t.cols.get() + p * kColumnBlock, h);
        }
        if (!packing || !vec_) continue;
        // Codes that fit the format go through the tables (the general packing names a wide one).
        std::uint8_t any = 0;
        for (std::size_t i = 0; i < h * k_; ++i) any |= t.rows[i];
        const bool fits = dec_b_.tables() && (any & dec_b_.wide()) == 0;
        for (std::size_t q = j0 / kPanel; q < std::min((j0 + h) / kPanel, panels_); ++q) {
          const std::uint8_t* from = t.cols.get() + (q * kPanel - j0);
          if (fits) {
            pack_panel_fits(q, from, bvk_ + q * k_ * kPanel, bek_ + q * k8_ * kPanel);
          } else {
            pack_panel_from(q, from, kColumnBlock, bvk_ + q * k_ * kPanel, bek_ + q * k8_ * kPanel);
          }
        }
      }
    });
    if (!packing) return nullptr;
    b_ = std::span<const In>(codes, k_ * n_);
    prepare_b_columns();
    return take_packed_b();
  }

  /// Computes every element of D.
  void run() {
    if (!plan()) {
      tbb::parallel_for(std::size_t{0}, m_ * n_,
                        [&](std::size_t e) { d_[e] = static_cast<Acc>(general(e / n_, e % n_)); });
      return;
    }
    prepare_a();
    if (pre_ != nullptr) {
      fused_ = false;
      bvk_ = pre_->bvk;
      bek_ = pre_->bek;
      pb_ = pre_->pb;
      bspecial_ = pre_->bspecial.data();
    } else {
      prepare_b();
    }
    if (fused_) run_fused_panels();
    // Columns in chunks of 16: a whole chunk inside the panels goes to the vector kernel (done
    // above when fused).
    const std::size_t chunks = (n_ + kPanel - 1) / kPanel;
    tbb::parallel_for(tbb::blocked_range2d<std::size_t>(0, m_, 16, 0, chunks, 8), [&](const auto& r) {
      const std::size_t jv0 = r.cols().begin() * kPanel;
      const std::size_t jv1 = vec_ ? std::min(r.cols().end(), panels_) * kPanel : jv0;
      if (jv1 > jv0 && !fused_) tile_rows(r.rows().begin(), r.rows().end(), jv0, jv1);
      scalar_rows(r.rows().begin(), r.rows().end(), jv0, jv1, std::min(r.cols().end() * kPanel, n_));
    });
  }

 private:
  // The general engine's result for element (i, j), its operands decoded again from the codes (rare).
  std::uint64_t general(std::size_t i, std::size_t j) const {
    std::vector<Operand> row(k_), col(k_);
    for (std::size_t p = 0; p < k_; ++p) {
      row[p] = dec_a_(a_[i * k_ + p], i * k_ + p);
      col[p] = dec_b_(b_[p * n_ + j], p * n_ + j);
    }
    return dot_decoded(dp_, row, col, c_.empty() ? 0 : c_[i * n_ + j], {}, i * n_ + j);
  }

  // The kernels' parameters; false when ideal sums may not fit int64 (every element goes general).
  bool plan() {
    exact_ = dp_.alignment == Alignment::exact;
    // ideal in int64: products span at most `span` bits above lmin, K of them need bit_width(K) more.
    const int span = (dp_.a.emax - dp_.a.emin + dp_.a.mantissa_bits + 1) +
                     (dp_.b.emax - dp_.b.emin + dp_.b.mantissa_bits + 1) + 2;
    if (exact_ && span + static_cast<int>(std::bit_width(k_)) > 62) return false;
    lmin_ = (dp_.a.emin - dp_.a.mantissa_bits) + (dp_.b.emin - dp_.b.mantissa_bits);
    const std::size_t bs = exact_ ? std::max<std::size_t>(k_, 1) : static_cast<std::size_t>(dp_.fused_terms);
    const int F = dp_.fraction_bits;
    const int floor = dp_.exponent_floor ? *dp_.exponent_floor : INT_MIN / 2;
    const int mbsum = dp_.a.mantissa_bits + dp_.b.mantissa_bits;
    // int32 kernel: products have at most mbsum + 2 bits; lift them to 30 bits; the largest left
    // shift F − mbsum must fit in the lift, and 64 terms of < 2^(F+2) must fit in int32.
    const int lift32 = 30 - (mbsum + 2);
    const bool use32 = dp_.alignment == Alignment::truncate && F - mbsum <= lift32 && F + 2 + 7 <= 31 &&
                       dp_.fused_terms <= 64;
    const int base_shift32 = mbsum - F + lift32;
    // Normal results up to this exponent are finite (above it round_state checks max_code).
    const format::Format& acc = dp_.accumulator;
    const std::uint64_t top = (static_cast<std::uint64_t>(acc.emax + acc.bias) << acc.mantissa_bits) |
                              ((std::uint64_t{1} << acc.mantissa_bits) - 1);
    const int emax_common = top == acc.max_code ? acc.emax : acc.emax - 1;
    const std::size_t block8 = (bs + kExpGroup - 1) / kExpGroup * kExpGroup;
    tp_ = ElementParams{
        {&dp_, bs, F, floor, emax_common, block8}, mbsum - F + kLift, base_shift32, lift32, use32};
    // The vector kernel keeps the accumulator as a float, exponents in 8-bit lanes, and forms,
    // truncates and sums each block's products in float.
    vec_ = use32 && !exact_ && rows_trunc_applies(dp_, F, bs);
    k8_ = vec_ ? (k_ + bs - 1) / bs * block8 : 0;
    panels_ = vec_ ? n_ / kPanel : 0;
    jt_ = panels_ * kPanel;
    // Few rows (decode: m = 1), or a B too large to keep packed (an LM head): each panel is
    // packed where it is used, while it is in cache, instead of all of B up front.
    const std::size_t packed_b_bytes = panels_ * kPanel * (k_ * sizeof(float) + k8_);
    fused_ = vec_ && (m_ <= kFusedRows || packed_b_bytes > kScratchKept);
    return true;
  }

  // A by rows.
  void prepare_a() {
    // The tile kernel reads values and exponents; the per-element kernels significands (and, for
    // ideal, lsb exponents) of the columns outside the panels.
    const bool scalar_cols = !vec_ || jt_ < n_;
    pa_ = make_packed(scratch_, m_, k_, vec_, scalar_cols, scalar_cols, exact_, k8_);
    tbb::parallel_for(std::size_t{0}, m_, [&](std::size_t i) {
      for (std::size_t p = 0; p < k_; ++p) {
        const Lane x = dec_a_.lane(a_[i * k_ + p], i * k_ + p);
        if (put(pa_, i * k_ + p, x)) pa_.special[i] = 1;
        if (vec_) pa_.e8[i * k8_ + exp8_index(tp_, p)] = exp8(x.e);
      }
    });
  }

  // B's first n/16·16 columns (vector kernel) in panels of 16: values as floats, [n/16][k][16], and
  // 8-bit exponents, [n/16][k8/4][16][4] (packed here unless fused); the other columns (all of
  // them without the vector kernel) by columns, [n − jt][k].
  void prepare_b() {
    bspecial_own_.assign(n_, 0);
    bspecial_ = bspecial_own_.data();
    const bool held = !fused_;
    bvk_ = scratch_.take<float>(held ? panels_ * k_ * kPanel : 0);
    bek_ = scratch_.take<std::int8_t>(held ? panels_ * k8_ * kPanel : 0);
    if (held) {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, panels_, 8), [&](const auto& r) {
        for (std::size_t q = r.begin(); q != r.end(); ++q) {
          pack_panel(q, bvk_ + q * k_ * kPanel, bek_ + q * k8_ * kPanel);
        }
      });
    }
    prepare_b_columns();
  }

  // B's columns outside the panels (all of them without the vector kernel), by columns.
  void prepare_b_columns() {
    pb_ = make_packed(scratch_, n_ - jt_, k_, false, true, true, exact_, 0);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(jt_, n_, 16), [&](const auto& r) {
      for (std::size_t p = 0; p < k_; ++p) {
        for (std::size_t j = r.begin(); j != r.end(); ++j) {
          if (put(pb_, (j - jt_) * k_ + p, dec_b_.lane(b_[p * n_ + j], p * n_ + j))) bspecial_own_[j] = 1;
        }
      }
    });
  }

  // Packs panel q (columns 16q..16q+15) into pv ([k][16]) and pe ([k8/4][16][4]) and marks its
  // NaN/Inf columns.
  void pack_panel(std::size_t q, float* pv, std::int8_t* pe) {
    pack_panel_from(q, b_.data() + q * kPanel, n_, pv, pe);
  }

  // pack_panel from the panel's codes of row p of B at codes[p·stride] (B itself: stride n).
  template <typename C>
  void pack_panel_from(std::size_t q, const C* codes, std::size_t stride, float* pv, std::int8_t* pe) {
    if (k8_ != k_) std::fill_n(pe, k8_ * kPanel, kZeroExp8);
    bool special[kPanel] = {};
    for (std::size_t p = 0; p < k_; ++p) {
      const C* row = codes + p * stride;
      // B's rows are n codes apart (a page or more for wide B): fetch ahead of the decoding.
      if (stride == n_ && p + kPackAhead < k_) __builtin_prefetch(row + kPackAhead * stride);
      const std::size_t x8 = exp8_index(tp_, p);
      std::int8_t* pe_p = pe + (x8 / kExpGroup) * kPanel * kExpGroup + x8 % kExpGroup;
      if (dec_b_.panel_row(row, pv + p * kPanel, pe_p, kExpGroup, special)) continue;
      for (std::size_t l = 0; l < kPanel; ++l) {
        const Lane x = dec_b_.lane(row[l], p * n_ + q * kPanel + l);
        pv[p * kPanel + l] = x.v;
        pe_p[l * kExpGroup] = exp8(x.e);
        special[l] |= x.special;
      }
    }
    for (std::size_t l = 0; l < kPanel; ++l) bspecial_own_[q * kPanel + l] = special[l] ? 1 : 0;
  }

  // pack_panel_from for codes that fit the format (tables), codes[p·kColumnBlock] as transposed by
  // pack_b_columns.
  void pack_panel_fits(std::size_t q, const std::uint8_t* codes, float* pv, std::int8_t* pe) {
    if (k8_ != k_) std::fill_n(pe, k8_ * kPanel, kZeroExp8);
    const float* values = dec_b_.values();
    const std::int8_t* exps = dec_b_.exps();
    const std::uint8_t* specials = dec_b_.specials();
    std::uint32_t special = 0;  // bit l: column l holds NaN or Inf
    float row[kPanel];
    for (std::size_t p = 0; p < k_; ++p) {
      const std::uint8_t* c = codes + p * kColumnBlock;
      const std::size_t x8 = exp8_index(tp_, p);
      std::int8_t* pe_p = pe + (x8 / kExpGroup) * kPanel * kExpGroup + x8 % kExpGroup;
      for (std::size_t l = 0; l < kPanel; ++l) {
        row[l] = values[c[l]];
        pe_p[l * kExpGroup] = exps[c[l]];
        special |= std::uint32_t{specials[c[l]]} << l;
      }
      std::memcpy(pv + p * kPanel, row, sizeof(row));
    }
    for (std::size_t l = 0; l < kPanel; ++l)
      bspecial_own_[q * kPanel + l] = ((special >> l) & 1U) != 0 ? 1 : 0;
  }

  // Runs the R-row tile kernel on rows `rows` and the panel pv, pe of columns j..j+15, and writes
  // its outputs (the general engine's where the kernel or a NaN/Inf column defers).
  template <std::size_t R>
  void run_tile(const std::size_t* rows, std::size_t j, void (*kernel)(RowsArgs<R>&), const float* pv,
                const std::int8_t* pe) {
    RowsArgs<R> args;
    args.P = &tp_;
    args.bvk = pv;
    args.bek = pe;
    args.k = k_;
    for (std::size_t r = 0; r < R; ++r) {
      args.av[r] = pa_.v + rows[r] * k_;
      args.ae[r] = pa_.e8 + rows[r] * k8_;
      for (std::size_t l = 0; l < kPanel; ++l) args.c[r][l] = c_.empty() ? 0 : c_[rows[r] * n_ + j + l];
    }
    kernel(args);
    for (std::size_t r = 0; r < R; ++r) {
      for (std::size_t l = 0; l < kPanel; ++l) {
        const std::size_t at = rows[r] * n_ + j + l;
        d_[at] = static_cast<Acc>((args.ok[r][l] && bspecial_[j + l] == 0) ? args.out[r][l]
                                                                           : general(rows[r], j + l));
      }
    }
  }

  // Few rows: every panel packed where it is used, then all plain rows through the tile kernel.
  void run_fused_panels() {
    std::vector<std::size_t> plain;  // rows without NaN or Inf
    for (std::size_t i = 0; i < m_; ++i) {
      if (pa_.special[i] == 0) plain.push_back(i);
    }
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, panels_, 4), [&](const auto& r) {
      // One panel per task (a Scratch is one thread's): small, [k][16].
      const auto pv = std::make_unique_for_overwrite<float[]>(k_ * kPanel);
      const auto pe = std::make_unique_for_overwrite<std::int8_t[]>(k8_ * kPanel);
      for (std::size_t q = r.begin(); q != r.end(); ++q) {
        pack_panel(q, pv.get(), pe.get());
        std::size_t t = 0;
        for (; t + kRowTile <= plain.size(); t += kRowTile) {
          run_tile<kRowTile>(plain.data() + t, q * kPanel, &rows_trunc, pv.get(), pe.get());
        }
        for (; t < plain.size(); ++t)
          run_tile<1>(plain.data() + t, q * kPanel, &rows_trunc, pv.get(), pe.get());
      }
    });
  }

  // Rows i0..i1 without NaN or Inf, columns jv0..jv1 (whole panels), through the tile kernel: in
  // blocks of up to kRowBlock rows, each of which meets every panel once, so a panel is read from
  // memory once per block, not once per tile (a B of an LM head does not fit any cache).
  void tile_rows(std::size_t i0, std::size_t i1, std::size_t jv0, std::size_t jv1) {
    std::size_t plain[kRowBlock];  // rows without NaN or Inf
    std::size_t np = 0;
    auto flush = [&] {
      for (std::size_t j = jv0; j < jv1; j += kPanel) {
        std::size_t t = 0;
        for (; t + kRowTile <= np; t += kRowTile) {
          run_tile<kRowTile>(plain + t, j, &rows_trunc, bvk_ + j * k_, bek_ + j * k8_);
        }
        for (; t < np; ++t) run_tile<1>(plain + t, j, &rows_trunc, bvk_ + j * k_, bek_ + j * k8_);
      }
      np = 0;
    };
    for (std::size_t i = i0; i != i1; ++i) {
      if (pa_.special[i] != 0) continue;
      plain[np++] = i;
      if (np == kRowBlock) flush();
    }
    flush();
  }

  // Rows i0..i1, columns up to jend the tile kernel did not take (rows it took start at jv1).
  void scalar_rows(std::size_t i0, std::size_t i1, std::size_t jv0, std::size_t jv1, std::size_t jend) {
    for (std::size_t i = i0; i != i1; ++i) {
      for (std::size_t j = pa_.special[i] == 0 ? jv1 : jv0; j != jend; ++j)
        d_[i * n_ + j] = static_cast<Acc>(element(i, j));
    }
  }

  // Element (i, j) accumulated alone: ideal in int64, else element_trunc.
  std::uint64_t element(std::size_t i, std::size_t j) const {
    const std::uint64_t cc = c_.empty() ? 0 : c_[i * n_ + j];
    if (pa_.special[i] != 0 || bspecial_[j] != 0) return general(i, j);
    const std::int32_t* am = pa_.m + i * k_;
    const std::int32_t* ae = pa_.e + i * k_;
    const std::int32_t* bm = pb_.m + (j - jt_) * k_;
    const std::int32_t* be = pb_.e + (j - jt_) * k_;
    if (exact_) {
      const std::int32_t* al = pa_.l + i * k_;
      const std::int32_t* bl = pb_.l + (j - jt_) * k_;
      std::int64_t nz = 0;
      const std::int64_t s = element_exact(am, al, bm, bl, k_, lmin_, nz);
      const Kind ck = decode_acc(dp_.accumulator, cc, dp_.addend_emin).kind;
      const bool plain = nz != 0 && ck != Kind::nan && ck != Kind::inf;
      return plain ? finish_block(dp_, s, lmin_, false, cc, true) : general(i, j);
    }
    std::uint64_t out = 0;
    return element_trunc(tp_, am, ae, bm, be, k_, cc, out) ? out : general(i, j);
  }

  const Datapath& dp_;
  std::size_t m_, n_, k_;
  std::span<const In> a_, b_;
  std::span<const Acc> c_;
  std::span<Acc> d_;
  const Decoder dec_a_, dec_b_;
  const FastB* pre_;
  // Set by plan().
  bool exact_ = false, vec_ = false, fused_ = false;
  int lmin_ = 0;
  ElementParams tp_{};
  std::size_t panels_ = 0, jt_ = 0;  // B's vector panels; jt = their column count
  std::size_t k8_ = 0;               // 8-bit exponents per row of A and per column of a panel
  Scratch scratch_;                  // the packed arrays' memory
  // Set by prepare_a() and prepare_b().
  Packed pa_, pb_;
  std::vector<char> bspecial_own_;  // per column of B: holds NaN or Inf (when packed here)
  const char* bspecial_ = nullptr;  // bspecial_own_ or pre_'s
  float* bvk_ = nullptr;
  std::int8_t* bek_ = nullptr;
};

}  // namespace

void fast_gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k,
               std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
               std::span<const std::uint64_t> c, std::span<std::uint64_t> d) {
  GemmRun<std::uint64_t, std::uint64_t>(dp, m, n, k, a, b, c, d).run();
}

void fast_gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k,
               std::span<const std::uint8_t> a, std::span<const std::uint8_t> b,
               std::span<const std::uint32_t> c, std::span<std::uint32_t> d) {
  GemmRun<std::uint8_t, std::uint32_t>(dp, m, n, k, a, b, c, d).run();
}

std::shared_ptr<const FastB> fast_prepare_b(const Datapath& dp, std::size_t n, std::size_t k,
                                            std::span<const std::uint8_t> b) {
  return GemmRun<std::uint8_t, std::uint32_t>(dp, 0, n, k, {}, b, {}, {}).pack_b();
}

std::shared_ptr<const FastB> fast_prepare_b(
    const Datapath& dp, std::size_t n, std::size_t k,
    const std::function<void(std::size_t, std::size_t, std::uint8_t*)>& columns, std::uint8_t* codes,
    bool pack) {
  return GemmRun<std::uint8_t, std::uint32_t>(dp, 0, n, k, {}, {}, {}, {})
      .pack_b_columns(columns, codes, pack);
}

std::size_t fast_b_bytes(const FastB& b) { return b.bytes; }

std::size_t fast_b_bytes(const Datapath& dp, std::size_t n, std::size_t k) {
  return GemmRun<std::uint8_t, std::uint32_t>(dp, 0, n, k, {}, {}, {}, {}).packed_b_size();
}

void fast_gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k,
               std::span<const std::uint8_t> a, std::span<const std::uint8_t> b, const FastB& pre,
               std::span<const std::uint32_t> c, std::span<std::uint32_t> d) {
  GemmRun<std::uint8_t, std::uint32_t>(dp, m, n, k, a, b, c, d, &pre).run();
}

}  // namespace lpemu::datapath::detail
