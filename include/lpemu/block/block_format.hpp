// Block-scaled formats as run-time records.
//
// Specs implemented by the built-in records (see formats/block/*.toml for each file's source):
//   OCP Microscaling Formats (MX) Specification v1.0 (2023-09): MXFP8 (E4M3/E5M2), MXFP6
//     (E2M3/E3M2), MXFP4 (E2M1) and MXINT8 — blocks of 32 elements sharing one E8M0 scale, the
//     shared-scale computation floor(log2(amax)) − emax_elem, elements clamped to ±max normal.
//   NVFP4 (E2M1 elements, blocks of 16, an E4M3 block scale and an FP32 per-tensor scale) as
//     defined in docs/block-formats.md (lpemu's exact definition of the two-level rule).
// Every edge case the specs leave open is a field here with a documented default (docs/block-formats.md).
#pragma once

#include <cstddef>
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

namespace lpemu::block {

/// Which elements share a scale.
///  block: `block_size` consecutive elements along `axis`;  tile: `tile_rows` × `tile_cols` boxes
///  over the last two axes;  per_tensor: one scale;  per_row: one per last-axis vector (token);
///  per_column: one per last-axis index (channel), shared over all other axes.
enum class Granularity : std::uint8_t { block, tile, per_tensor, per_row, per_column };

/// How a block's scale is chosen from its largest magnitude amax.
///  ocp: 2^(floor(log2 amax) − emax_elem) (OCP MX v1.0 shared-scale computation);
///  ceil: the smallest power of two 2^s with amax ≤ max_elem·2^s (nothing saturates; "rceil");
///  even: ocp applied to amax rounded (ties away) to the element's precision;
///  amax_over_max: amax / max_elem (/ tensor scale) rounded to the scale format (NVFP4 style);
///  search: the candidate with the least squared error among the base scale (ocp for power-of-two
///  scales, amax_over_max otherwise) and its ±search_radius neighbours (exponents or codes).
enum class ScaleRule : std::uint8_t { ocp, ceil, even, amax_over_max, search };

/// What a NaN or ±Inf input does to its block.
///  nan_block: the scale becomes NaN and every element of the block decodes to NaN (OCP MX v1.0,
///  as microxcaling does); ignore: the scale comes from the finite elements, and each non-finite
///  element is converted alone (NaN stays NaN, ±Inf saturates to ±max·scale).
enum class NonFinite : std::uint8_t { nan_block, ignore };

/// A scale above the scale format's range: NaN (the whole block is NaN), or the largest scale.
enum class ScaleOverflow : std::uint8_t { nan, clamp };

/// float32 subnormal inputs: keep them exactly; flush each to ±0 first (DAZ); or zero the whole
/// block when its amax is a float32 subnormal (microxcaling's mx_flush_fp32_subnorms).
enum class SubnormalInputs : std::uint8_t { keep, flush, flush_block };

/// Sign of a zero result: keep (−0 for negative inputs that round to zero, exact arithmetic) or
/// positive (every zero is +0, as microxcaling's PyTorch path gives).
enum class SignedZero : std::uint8_t { keep, positive };

/// Optional second-level scale: none, or an FP32 per-tensor scale g = fp32(amax_tensor /
/// (max_elem · max_scale)) that divides every block scale (NVFP4 two-level scaling).
enum class TensorScale : std::uint8_t { none, fp32 };

/// A block-scaled format: element format, scale format, granularity, scale rule and edge cases.
struct BlockFormat {
  std::string name;
  std::vector<std::string> aliases;
  std::string source;  ///< the spec the format follows
  std::string description;

  format::Format element;      ///< resolved element format
  std::string scale_name;      ///< "pow2" or an element-format name (e8m0, fp8_e4m3, fp32, ...)
  bool scale_is_pow2 = false;  ///< "pow2": an unbounded power of two, stored as its int32 exponent
  format::Format scale;        ///< resolved scale format (unused when scale_is_pow2)

  Granularity granularity = Granularity::block;
  int block_size = 32;  ///< 1..4096 (granularity block)
  int axis = -1;        ///< blocked axis, negative counts from the end (granularity block)
  int tile_rows = 0;    ///< tile extents, 1..4096 (granularity tile)
  int tile_cols = 0;

  ScaleRule rule = ScaleRule::ocp;
  int search_radius = 1;  ///< scale rule search: candidates base−r..base+r (1..8)
  format::RoundingMode scale_rounding = format::RoundingMode::nearest_even;  ///< amax_over_max
  format::ConvertOptions element_options{};  ///< element rounding/seed/sr_bits; overflow saturates

  NonFinite nonfinite = NonFinite::nan_block;
  ScaleOverflow scale_overflow = ScaleOverflow::nan;
  SubnormalInputs subnormal_inputs = SubnormalInputs::keep;
  SignedZero signed_zero = SignedZero::keep;
  TensorScale tensor_scale = TensorScale::none;

  /// emax of the element for the scale rules: the exponent of the largest power of two ≤ max.
  int element_emax() const;
  /// Smallest exponent s with 2^s a value of the scale format (−1074 for "pow2").
  int scale_min_exponent() const;
  /// Largest exponent s with 2^s a value of the scale format (1023 for "pow2").
  int scale_max_exponent() const;
  /// Checks cross-field consistency; throws SpecError naming the field.
  void validate() const;

  /// Every field equal (element and scale formats compared as records).
  friend bool operator==(const BlockFormat&, const BlockFormat&) = default;
};

/// Parses a Granularity name; throws SpecError otherwise.
Granularity parse_granularity(std::string_view text);
/// Parses a ScaleRule name ("rceil" is an alias of "ceil"); throws SpecError otherwise.
ScaleRule parse_scale_rule(std::string_view text);
/// The TOML/CLI spelling of a Granularity.
std::string_view to_string(Granularity g);
/// The TOML/CLI spelling of a ScaleRule.
std::string_view to_string(ScaleRule r);
/// The TOML/CLI spelling of a NonFinite policy.
std::string_view to_string(NonFinite n);
/// The TOML/CLI spelling of a ScaleOverflow policy.
std::string_view to_string(ScaleOverflow o);
/// The TOML/CLI spelling of a SubnormalInputs policy.
std::string_view to_string(SubnormalInputs s);
/// The TOML/CLI spelling of a SignedZero policy.
std::string_view to_string(SignedZero s);
/// The TOML/CLI spelling of a TensorScale.
std::string_view to_string(TensorScale t);

/// Granularity as `lpemu formats list` prints it: "block 32", "tile 128x128", "tensor", ...
std::string describe_granularity(const BlockFormat& f);
/// Scale as `lpemu formats list` prints it: "e8m0", "pow2", "fp8_e4m3 + fp32", ...
std::string describe_scale(const BlockFormat& f);

/// What a caller may change in a block format for one call (`lpemu quantize`, the Python
/// module): unset fields keep the format's own values.
struct BlockOverrides {
  std::optional<int> axis;                   ///< blocked axis (negative counts from the end)
  std::optional<int> block_size;             ///< makes the format block-granular with this size
  std::string scale_rule;                    ///< empty: the format's rule
  format::ConvertOptions element_options{};  ///< rounding, seed, sr_bits, daz; overflow must saturate
};

/// `f` with `o` applied, validated; throws SpecError for a non-saturating overflow or ftz (block
/// formats always clamp elements to ±max and never flush outputs) or an invalid result.
BlockFormat with_overrides(BlockFormat f, const BlockOverrides& o);

/// Parses one block-format TOML document, resolving element and scale names in `elements`;
/// errors give origin:line, the field, the value and what was expected.
BlockFormat parse_block_format_toml(std::string_view text, std::string_view origin,
                                    const format::Registry& elements);

/// The block-format TOML document of `f`, the exact inverse of parse_block_format_toml: reading
/// it (with the registry `f`'s element and scale came from) gives a format equal to `f`. Not
/// written, as a block-format file cannot say them: element_options.seed, index_offset, overflow
/// (always saturate) and the flush flags (what a call's BlockOverrides set).
std::string to_toml(const BlockFormat& f);

class BlockRegistry;

/// Throws SpecError "<origin>: block format name 'x' is already an element format (...)" when a
/// block format's name or alias is also an element format's name or alias: quantisers, plan
/// roles and `quantize --format` look both up by one name, so one would shadow the other.
void check_no_element_names(const BlockRegistry& blocks, const format::Registry& elements);

/// Block formats by name and alias.
class BlockRegistry {
 public:
  /// The built-in block formats (formats/block/*.toml) over the built-in element formats.
  static const BlockRegistry& builtin();
  /// Built-ins, then DIR/block/*.toml of each LPEMU_FORMATS_PATH directory, then of `dirs`;
  /// element names resolve in `elements`.
  static BlockRegistry with_user_paths(const format::Registry& elements,
                                       const std::vector<std::filesystem::path>& dirs = {});

  /// Adds a block format; throws SpecError if its name or an alias is taken.
  void add(BlockFormat f, std::string origin);
  /// Parses and adds one TOML file.
  void add_file(const std::filesystem::path& file, const format::Registry& elements);
  /// Adds DIR/block/*.toml (if DIR/block exists).
  void add_directory(const std::filesystem::path& dir, const format::Registry& elements);

  /// The block format called `name` (or an alias); throws UnknownNameError with the closest names.
  const BlockFormat& get(std::string_view name) const;
  /// The block format called `name`, or nullptr.
  const BlockFormat* find(std::string_view name) const;
  /// Canonical names in sorted order.
  std::vector<std::string> names() const;
  /// Where a block format came from ("builtin:block/mxfp4.toml" or a path).
  const std::string& origin(std::string_view name) const;

 private:
  lpemu::detail::NamedRegistry<BlockFormat> formats_{{"block format", ""}};
};

}  // namespace lpemu::block
