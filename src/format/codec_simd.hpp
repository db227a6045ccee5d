// Highway kernels of the bulk codecs (format/codec_simd.cpp), dispatched at run time to the best
// SIMD target of the machine (hwy::SetSupportedTargetsForTest narrows the choice in tests).
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/codec_detail.hpp"

namespace lpemu::format::detail {

/// Decodes n codes (bits outside `mask` ignored) of a fast-kernel format (p = make_fast) to float32, as
/// fast_decode_one.
void simd_decode(const Fast& p, std::uint32_t mask, const std::uint8_t* in, float* out, std::size_t n);
/// As above, for 16-bit code storage.
void simd_decode(const Fast& p, std::uint32_t mask, const std::uint16_t* in, float* out, std::size_t n);
/// As above, for 32-bit code storage.
void simd_decode(const Fast& p, std::uint32_t mask, const std::uint32_t* in, float* out, std::size_t n);
/// Encodes n float32 values to codes of a fast-kernel format, as fast_encode_one; element i has
/// stochastic-rounding index index0 + i.
void simd_encode(const Fast& p, RoundingMode mode, const float* in, std::uint8_t* out, std::size_t n,
                 std::uint64_t index0);
/// As above, for 16-bit code storage.
void simd_encode(const Fast& p, RoundingMode mode, const float* in, std::uint16_t* out, std::size_t n,
                 std::uint64_t index0);
/// As above, for 32-bit code storage.
void simd_encode(const Fast& p, RoundingMode mode, const float* in, std::uint32_t* out, std::size_t n,
                 std::uint64_t index0);
/// The values of the codes simd_encode gives (float32 to float32, as quantize()).
void simd_quantize(const Fast& p, RoundingMode mode, const float* in, float* out, std::size_t n,
                   std::uint64_t index0);

}  // namespace lpemu::format::detail
