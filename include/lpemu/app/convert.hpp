// `lpemu convert` and `lpemu.call("convert", ...)`: a stream of codes of one format converted into
// codes of another in constant memory, chunk by chunk and in parallel. float32 and float64 data
// are simply codes of fp32 and fp64.
//
// Storage: codes of 8 bits or fewer take one byte each, right-aligned; wider codes take 2, 4 or 8
// little-endian bytes. With `packed`, codes narrower than 8 bits are packed densely, LSB first:
// code i occupies stream bits [i·w, (i+1)·w), where stream bit k is bit (k mod 8) of byte k/8 and
// the code's bit 0 comes first (so two FP4 codes share a byte with code 0 in the low nibble).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::app {

/// What to convert.
struct ConvertRequest {
  std::string from;                ///< source format (empty: from a .npy float dtype, fp32/fp64/fp16)
  std::string to;                  ///< destination format (required)
  std::string input;               ///< FILE.npy, a raw little-endian FILE, or "-" for standard input
  std::string output;              ///< FILE.npy, a raw FILE, or "-" for standard output
  bool packed = false;             ///< codes narrower than 8 bits are bit-packed (raw streams)
  bool force = false;              ///< replace an existing output file
  format::ConvertOptions options;  ///< rounding, overflow, seed, sr_bits, ftz, daz
};

/// A finished conversion.
struct ConvertResult {
  std::string from, to;            ///< the formats' names
  std::string input, output;       ///< as requested ("-" for the standard streams)
  std::size_t elements = 0;        ///< codes converted
  std::uint64_t input_bytes = 0;   ///< bytes of codes read (a .npy header not counted)
  std::uint64_t output_bytes = 0;  ///< bytes of codes written (a .npy header not counted)
  bool packed = false;
};

/// Converts as `request` says; the output file appears only when the whole input converted.
/// Throws lpemu::Error (IoError, SpecError, ...) for bad input, naming the file and element.
ConvertResult convert(experiment::Context& ctx, const ConvertRequest& request);

/// The result's one serialised form (`lpemu convert --json`).
Fields fields(const ConvertResult& r);

/// A request from named fields (from, to, input, output, packed, force, rounding, overflow, seed,
/// sr_bits, ftz, daz).
ConvertRequest convert_request(const Fields& f);

}  // namespace lpemu::app
