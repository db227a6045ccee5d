// quantize (value -> nearest representable value), encode (value -> code), decode (code -> value),
// scalar and bulk. Bulk paths are parallel (oneTBB, fixed chunks) and give bit-identical
// results whatever the thread count: each element depends only on its value and its index.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "lpemu/format/format.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::format {

/// Rounds x to fmt under opts; `index` is the element index that selects stochastic-rounding bits.
double quantize(const Format& fmt, double x, const ConvertOptions& opts = {}, std::uint64_t index = 0);
/// As quantize(double), but flush_subnormal_inputs refers to float32 subnormals.
double quantize(const Format& fmt, float x, const ConvertOptions& opts = {}, std::uint64_t index = 0);
/// The code of quantize(fmt, x, ...): right-aligned in `fmt.bits` bits.
std::uint64_t encode(const Format& fmt, double x, const ConvertOptions& opts = {}, std::uint64_t index = 0);
/// As encode(double), but flush_subnormal_inputs refers to float32 subnormals.
std::uint64_t encode(const Format& fmt, float x, const ConvertOptions& opts = {}, std::uint64_t index = 0);
/// The value of a code (bits above fmt.bits are ignored); NaN codes give a NaN of the code's sign.
/// Formats without subnormals decode the unused subnormal codes as ±0.
double decode(const Format& fmt, std::uint64_t code);

/// True if `code` is a NaN of fmt.
bool is_nan_code(const Format& fmt, std::uint64_t code);
/// True if `code` is ±Inf of fmt.
bool is_inf_code(const Format& fmt, std::uint64_t code);
/// The code in fielded binary, e.g. "0'1111'110" for fp8_e4m3 448 or "1111'1111" for int8 -1.
std::string fielded_binary(const Format& fmt, std::uint64_t code);
/// The code in hex with the digits its width needs, e.g. "0x7e".
std::string hex_code(const Format& fmt, std::uint64_t code);
/// Throws SpecError "<what>: code 0x.. is wider than format 'F' (N bits); expected a code in 0x0..0xf" when
/// `code` has bits set above fmt.bits; every reader of user-supplied codes calls it instead of masking.
void require_code_fits(const Format& fmt, std::uint64_t code, std::string_view what);

// ---- bulk: element i uses stochastic index opts.index_offset + i; sizes must match -----------

/// Fake-quantises floats (output values lie on fmt's grid). `in` and `out` may alias exactly.
void quantize(const Format& fmt, std::span<const float> in, std::span<float> out,
              const ConvertOptions& opts = {});
/// Fake-quantises doubles.
void quantize(const Format& fmt, std::span<const double> in, std::span<double> out,
              const ConvertOptions& opts = {});
/// Encodes floats into codes of at most 8 bits.
void encode(const Format& fmt, std::span<const float> in, std::span<std::uint8_t> out,
            const ConvertOptions& opts = {});
/// Encodes floats into codes of at most 16 bits.
void encode(const Format& fmt, std::span<const float> in, std::span<std::uint16_t> out,
            const ConvertOptions& opts = {});
/// Encodes floats into codes of at most 32 bits.
void encode(const Format& fmt, std::span<const float> in, std::span<std::uint32_t> out,
            const ConvertOptions& opts = {});
/// Encodes doubles into codes of up to 64 bits.
void encode(const Format& fmt, std::span<const double> in, std::span<std::uint64_t> out,
            const ConvertOptions& opts = {});
/// Decodes codes of at most 8 bits (256-entry table) to floats.
void decode(const Format& fmt, std::span<const std::uint8_t> in, std::span<float> out);
/// Decodes codes of at most 16 bits to floats.
void decode(const Format& fmt, std::span<const std::uint16_t> in, std::span<float> out);
/// Decodes codes of at most 32 bits to floats (exact when fmt fits in float32).
void decode(const Format& fmt, std::span<const std::uint32_t> in, std::span<float> out);
/// Decodes codes of up to 64 bits to doubles.
void decode(const Format& fmt, std::span<const std::uint64_t> in, std::span<double> out);

/// True when every value of fmt is exactly a float32 (so float outputs lose nothing).
bool fits_in_float(const Format& fmt);

}  // namespace lpemu::format
