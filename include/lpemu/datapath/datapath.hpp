// Datapaths as data: how a compute core forms d = c + Σ a_i·b_i. A datapath is a TOML file under
// formats/datapath/ (embedded at build time) or DIR/datapath/.
//
// The block model is the "block fused multiply-add" (BFMA) of [KM-TACO] (Khattak & Mikaitis,
// "Accurate Models of NVIDIA Tensor Cores", arXiv:2512.07004, 2025: Generic_BFMA_TC.m,
// GlobalAlignmentSum()) and [MMA-Sim] (Xie et al., "MMA-Sim: Bit-Accurate Reference Model of
// Tensor Cores and Matrix Cores", arXiv:2511.10909, 2025: fused_sum()): exact products with
// unnormalised exponents, alignment of every term to 2^(E-F) below the block's largest exponent E,
// an exact fixed-point sum, one normalisation and one rounding per block, blocks chained along K.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lpemu/detail/named_registry.hpp"
#include "lpemu/format/format.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::datapath {

/// How the bits of a term below the alignment quantum 2^(E-F) are dropped.
enum class Alignment : std::uint8_t {
  exact,         ///< nothing dropped: the block sum is exact (F is unbounded)
  truncate,      ///< toward zero of each term's magnitude (NVIDIA tensor cores, the BFMA model)
  nearest_even,  ///< each term rounded to nearest, ties to even, at the quantum
  round_down,    ///< each term rounded toward −∞ (two's-complement truncation)
};

/// Where the addend c enters a block.
enum class Addend : std::uint8_t {
  fused,  ///< c joins the alignment and the fixed-point sum (the BFMA model)
  late,   ///< the block sums products only, rounds, then adds c with a second rounding
};

/// How K longer than one block is summed.
enum class Order : std::uint8_t {
  sequential,  ///< consecutive blocks of n, each block's output is the next block's c
               ///< (docs/tensor-core-model.md, step 8)
  pairwise,    ///< blocks from c = 0, block results added in a balanced tree, then c added
  split_k,     ///< K split into `split_chunks` contiguous chunks, each chained from 0, then summed
};

/// How per-block power-of-two scales (block-scaled formats) are applied.
enum class ScaleApplication : std::uint8_t {
  none,     ///< no block scales
  product,  ///< scale exponents added to each product's exponent before alignment (OCP MX, mxf8f6f4)
  group,    ///< products summed exactly per scale block, the group sum scaled, then aligned (nvf4)
};

/// Overflow of a rounded result. `ieee` is what format::Overflow::native does in a conversion;
/// the spec spelling "native" is kept as an alias of `infinity` for existing datapath files.
enum class OverflowRule : std::uint8_t {
  infinity,  ///< ±Inf (or NaN where the format has no Inf) whatever the rounding, as the published models
  ieee,      ///< IEEE 754 §7.4: directed roundings that do not round away give ±max finite
  saturate,  ///< ±max finite
};

/// Rounding of a result into a format, with the stochastic-rounding parameters.
struct ResultRounding {
  format::RoundingMode mode = format::RoundingMode::nearest_even;
  int sr_bits = 32;        ///< stochastic: random bits r
  std::uint64_t seed = 0;  ///< stochastic: stream seed

  friend bool operator==(const ResultRounding&, const ResultRounding&) = default;
};

/// A datapath: every parameter of d = c + Σ a_i·b_i as a core computes it.
struct Datapath {
  std::string name;
  std::string description;
  std::string source;             ///< citation(s) for the parameters
  std::vector<std::string> open;  ///< parameters the sources leave open

  // Inputs.
  format::Format a;  ///< element format of a
  format::Format b;  ///< element format of b
  bool flush_subnormal_inputs = false;
  ScaleApplication scale_application = ScaleApplication::none;
  int scale_block = 0;  ///< products per block scale (32 for MX, 16 for NVFP4)
  int group_size = 0;   ///< scale_application = group: products per exact group sum (0: scale_block)
  std::optional<format::Format>
      scale;  ///< format of the block scales ([inputs] scale, default e8m0); empty without block scales

  // Products.
  std::optional<format::Format> product_format;  ///< empty: products exact
  format::RoundingMode product_rounding = format::RoundingMode::nearest_even;

  // Block (fused multi-term adder).
  int fused_terms = 1;  ///< n products per block; 0 = all of K in one block
  Addend addend = Addend::fused;
  int addend_emin = 0;  ///< e_c = max(floor(log2|c|), addend_emin) (docs/tensor-core-model.md, step 3: −126
                        ///< even for fp16 c)
  ResultRounding late_rounding;  ///< addend = late: rounding of c + block result
  Alignment alignment = Alignment::exact;
  int fraction_bits = 0;              ///< F: bits kept below the block's largest exponent
  std::optional<int> exponent_floor;  ///< E_floor: E = max(E, E_floor) ([KM-TACO] min_exp_limit)
  bool sticky = false;                ///< each term keeps one sticky bit below the quantum

  // Accumulator: the format each block rounds to (c and d are in it unless promotion is set).
  format::Format accumulator;
  int accumulator_fraction_bits = 0;  ///< p_out: fraction bits kept (13 for FP8 "e8m13" in fp32)
  ResultRounding accumulator_rounding;
  OverflowRule overflow = OverflowRule::infinity;
  bool flush_subnormal_outputs = false;

  // Promotion: every `promote_every` products the partial sum is added into a wider accumulator.
  int promote_every = 0;  ///< 0: no promotion
  std::optional<format::Format> promotion_format;
  ResultRounding promotion_rounding;

  // Summation order for long K.
  Order order = Order::sequential;
  int split_chunks = 1;

  /// The format of c and d: the promotion format when promotion is on, else the accumulator.
  const format::Format& output() const { return promotion_format ? *promotion_format : accumulator; }
  /// One line: inputs, n, F, rounding, output.
  std::string summary() const;

  /// Every parameter equal (formats compared as records).
  friend bool operator==(const Datapath&, const Datapath&) = default;
};

/// Parses one datapath TOML document; element formats are looked up in `formats`. Errors name
/// origin:line, the field, the value and what was expected.
Datapath parse_datapath_toml(std::string_view text, std::string_view origin, const format::Registry& formats);

/// The engine's own float GEMM (Eigen, fp32 accumulation) is called "eigen"; plans and commands
/// may also write "fp32", "native" or "none" for it, so no datapath may take these names.
inline constexpr std::string_view kFloatGemm = "eigen";
/// True if `name` names the engine's float GEMM ("eigen", "fp32", "native" or "none").
constexpr bool names_float_gemm(std::string_view name) {
  return name == "eigen" || name == "fp32" || name == "native" || name == "none";
}

/// The datapath TOML document of `d`, the exact inverse of parse_datapath_toml: reading it (with
/// the registry `d`'s formats came from) gives a datapath equal to `d`. Every table is written in
/// full; F is written as alignment.fraction_bits (never extra_bits).
std::string to_toml(const Datapath& d);

// Named changes: each returns `d` with one group of parameters replaced, as the reader would have
// read a record that said so; the result is checked as parse_datapath_toml checks a file (throws
// SpecError naming the field).

/// `d` under another name and description.
Datapath with_name(Datapath d, std::string name, std::string description);
/// `d` with element formats `a` and `b` for its inputs.
Datapath with_inputs(Datapath d, const format::Format& a, const format::Format& b);
/// `d` fusing `n` products per block (block.fused_terms; 0 = all of K).
Datapath with_fused_terms(Datapath d, int n);
/// `d` keeping `fraction_bits` (F) bits below each block's largest exponent (alignment.fraction_bits);
/// an exact alignment becomes "truncate".
Datapath with_alignment_bits(Datapath d, int fraction_bits);
/// `d` rounding each block to `accumulator` (accumulator.format): the accumulator's fraction bits
/// become all of its mantissa, the exponent floor (which belongs to the old accumulator) goes, and
/// an addend_emin at the old accumulator's default follows the new one's.
Datapath with_accumulator(Datapath d, const format::Format& accumulator);
/// `d` adding its partial sum into `format` every `every` products, rounded by `rounding`
/// ([promotion]); `every` = 0 (format ignored): no promotion.
Datapath with_promotion(Datapath d, int every, const format::Format& format, ResultRounding rounding = {});
/// `d` without promotion.
Datapath without_promotion(Datapath d);
/// Throws SpecError "datapath 'name': field 'x' = v: expected ..." when `d` breaks a rule the
/// reader checks across fields (accumulator-like formats, fused terms with a dropping alignment).
void validate(const Datapath& d);

/// Datapaths by name.
class DatapathRegistry {
 public:
  /// The built-in presets (formats/datapath/*.toml) over the built-in element formats.
  static const DatapathRegistry& builtin();
  /// Built-in presets, then DIR/datapath/*.toml for each dir of LPEMU_FORMATS_PATH and `dirs`,
  /// with element formats from `formats`.
  static DatapathRegistry with_user_paths(const std::vector<std::filesystem::path>& dirs,
                                          const format::Registry& formats);

  /// Adds a datapath; throws SpecError if the name is taken or reserved (eigen, fp32, native, none).
  void add(Datapath d, std::string origin);
  /// The datapath called `name`; throws UnknownNameError with the closest names.
  const Datapath& get(std::string_view name) const;
  /// The datapath called `name`, or nullptr.
  const Datapath* find(std::string_view name) const;
  /// Names in sorted order.
  std::vector<std::string> names() const;
  /// Where a datapath came from ("builtin:datapath/ideal.toml" or a path).
  const std::string& origin(std::string_view name) const;

 private:
  lpemu::detail::NamedRegistry<Datapath> items_{{"datapath", " (see `lpemu datapath list`)"}};
};

/// TOML spelling of an Alignment.
std::string_view to_string(Alignment a);
/// TOML spelling of an Order.
std::string_view to_string(Order o);
/// TOML spelling of an Addend.
std::string_view to_string(Addend a);
/// TOML spelling of a ScaleApplication.
std::string_view to_string(ScaleApplication s);
/// TOML spelling of an OverflowRule ("infinity", "ieee", "saturate").
std::string_view to_string(OverflowRule o);

}  // namespace lpemu::datapath
