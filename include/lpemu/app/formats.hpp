// `lpemu formats list|show`, `lpemu encode`, `lpemu decode` and their `lpemu.call` commands
// ("formats list", "formats show", "encode", "decode"): the known formats and single codes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/format/format.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::app {

/// `formats list` takes no fields.
struct FormatsListRequest {};

/// Every known element format, then every block format.
struct FormatsListResult {
  /// One element format.
  struct Element {
    std::string name;
    int bits = 0;
    std::string encoding;  ///< format::describe()
    double max_finite = 0;
  };
  /// One block format.
  struct Block {
    std::string name, element, scale, granularity, scale_rule;
  };
  std::vector<Element> elements;
  std::vector<Block> blocks;
};

/// Lists the context's element and block formats, by name.
FormatsListResult formats_list(experiment::Context& ctx, const FormatsListRequest& request);
/// The result's one serialised form (`lpemu formats list --json`).
Fields fields(const FormatsListResult& r);
/// A request from named fields (none).
FormatsListRequest formats_list_request(const Fields& f);

/// Which format to show.
struct FormatShowRequest {
  std::string name;     ///< format name or alias
  bool values = false;  ///< list every code with its value (formats of at most 16 bits)
};

/// One code of a format: its hex and fielded binary spelling and its value.
struct CodeValue {
  std::string format;  ///< the format's name
  std::uint64_t code = 0;
  std::string hex, fielded;
  double value = 0;
};

/// A format's fields, limits and special codes.
struct FormatShowResult {
  format::Format format;
  std::string origin;               ///< where it is defined
  std::uint64_t finite_values = 0;  ///< codes with a finite value
  std::vector<CodeValue> values;    ///< every code, if asked for
};

/// Describes one element format; SpecError for --values on a format wider than 16 bits.
FormatShowResult format_show(experiment::Context& ctx, const FormatShowRequest& request);
/// The result's one serialised form (`lpemu formats show --json`).
Fields fields(const FormatShowResult& r);
/// A request from named fields (name, values).
FormatShowRequest format_show_request(const Fields& f);

/// A value to round to a format's code.
struct EncodeRequest {
  std::string format;  ///< format name or alias
  double value = 0;
  format::ConvertOptions options;  ///< rounding, overflow, seed, sr_bits, ftz, daz
};

/// The code of `request.value` in its format.
CodeValue encode(experiment::Context& ctx, const EncodeRequest& request);
/// A request from named fields (format, value, rounding, overflow, seed, sr_bits, ftz, daz).
EncodeRequest encode_request(const Fields& f);

/// A code to decode.
struct DecodeRequest {
  std::string format;  ///< format name or alias
  std::string code;    ///< decimal, 0x hex or 0b binary
};

/// The value of a code; Error for a code that is not an unsigned integer or wider than the format.
CodeValue decode(experiment::Context& ctx, const DecodeRequest& request);
/// A request from named fields (format, code: a string as the CLI takes it, or an integer).
DecodeRequest decode_request(const Fields& f);

/// The one serialised form of a code (`lpemu encode --json`, `lpemu decode --json`).
Fields fields(const CodeValue& c);

}  // namespace lpemu::app
