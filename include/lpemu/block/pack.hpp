// Packed byte layout of block-encoded tensors (docs/block-formats.md, packed layout).
// Codes of b bits form a little-endian bit stream: code i occupies bits [i·b, (i+1)·b) of the
// stream, bit j of the stream being bit (j mod 8) of byte ⌊j/8⌋. So FP4 puts element 0 in the low
// nibble of byte 0 and element 1 in its high nibble (PyTorch's float4_e2m1fn_x2 for
// torch._scaled_mm, NVIDIA's cvt e2m1x2); FP6 puts 4 elements in 3 bytes; 8-bit codes are one
// byte each; 16- and 32-bit codes are little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace lpemu::block {

/// Packs `codes` of `bits` bits (1..32) into the little-endian bit stream described above.
std::vector<std::uint8_t> pack_codes(std::span<const std::uint32_t> codes, int bits);
/// Unpacks `count` codes of `bits` bits; throws ShapeError if `bytes` is too short.
std::vector<std::uint32_t> unpack_codes(std::span<const std::uint8_t> bytes, int bits, std::size_t count);
/// Bytes that `count` packed codes of `bits` bits take: ⌈count·bits / 8⌉.
std::size_t packed_bytes(std::size_t count, int bits);
/// Packs `codes` into `out` (exactly packed_bytes(codes.size(), bits) bytes; ShapeError otherwise).
void pack_codes_into(std::span<const std::uint32_t> codes, int bits, std::span<std::uint8_t> out);
/// Unpacks out.size() codes of `bits` bits from `bytes` into `out`; ShapeError if `bytes` is too short.
void unpack_codes_into(std::span<const std::uint8_t> bytes, int bits, std::span<std::uint32_t> out);

}  // namespace lpemu::block
