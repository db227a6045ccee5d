#include "lpemu/block/pack.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "lpemu/error.hpp"

namespace lpemu::block {
namespace {

void check_bits(int bits, const char* what) {
  if (bits < 1 || bits > 32)
    throw ShapeError(std::string(what) + ": code width " + std::to_string(bits) + " is not 1..32");
}

// Widths below 8 bits: each group of 8 codes fills exactly B bytes, assembled in one 64-bit word
// (constant trip counts, so the compiler unrolls both loops). Returns the codes packed.
template <int B>
std::size_t pack_groups(const std::uint32_t* codes, std::size_t n, std::uint8_t* out) {
  constexpr std::uint64_t mask = (std::uint64_t{1} << B) - 1;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8, out += B) {
    std::uint64_t acc = 0;
    for (int j = 0; j < 8; ++j) acc |= (codes[i + static_cast<std::size_t>(j)] & mask) << (j * B);
    for (int b = 0; b < B; ++b) out[b] = static_cast<std::uint8_t>(acc >> (8 * b));
  }
  return i;
}

// The inverse of pack_groups: whole groups of 8 codes from B bytes each; returns the codes read.
template <int B>
std::size_t unpack_groups(const std::uint8_t* bytes, std::uint32_t* out, std::size_t n) {
  constexpr std::uint64_t mask = (std::uint64_t{1} << B) - 1;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8, bytes += B) {
    std::uint64_t acc = 0;
    for (int b = 0; b < B; ++b) acc |= std::uint64_t{bytes[b]} << (8 * b);
    for (int j = 0; j < 8; ++j)
      out[i + static_cast<std::size_t>(j)] = static_cast<std::uint32_t>((acc >> (j * B)) & mask);
  }
  return i;
}

// Calls f.template operator()<B>() for widths B in 1..7 other than 4 (which pairs into bytes);
// returns its result, or 0 (no codes handled) for other widths.
template <class F>
std::size_t for_sub_byte_width(int bits, F&& f) {
  switch (bits) {
    case 1: return f.template operator()<1>();
    case 2: return f.template operator()<2>();
    case 3: return f.template operator()<3>();
    case 5: return f.template operator()<5>();
    case 6: return f.template operator()<6>();
    case 7: return f.template operator()<7>();
    default: return 0;
  }
}

// Byte-aligned widths are little-endian copies; 4-bit codes pair into bytes; widths below 8 bits
// go in groups of 8 codes; what is left, and other widths, go through a 64-bit bit accumulator
// (at most 7 + 32 bits are ever pending).
void pack_kernel(const std::uint32_t* codes, std::size_t n, int bits, std::uint8_t* out) {
  const std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
  if (bits == 8 || bits == 16 || bits == 32) {
    const int w = bits / 8;
    for (std::size_t i = 0; i < n; ++i) {
      for (int b = 0; b < w; ++b)
        out[i * static_cast<std::size_t>(w) + static_cast<std::size_t>(b)] =
            static_cast<std::uint8_t>(codes[i] >> (8 * b));
    }
    return;
  }
  if (bits == 4) {
    for (std::size_t i = 0; i + 1 < n; i += 2) {
      out[i / 2] = static_cast<std::uint8_t>((codes[i] & 0xFU) | ((codes[i + 1] & 0xFU) << 4));
    }
    if (n % 2 != 0) out[n / 2] = static_cast<std::uint8_t>(codes[n - 1] & 0xFU);
    return;
  }
  const std::size_t grouped = for_sub_byte_width(
      bits, [&]<int B>() { return pack_groups<B>(codes, n, out); });  // a multiple of 8 codes: whole bytes
  std::uint64_t acc = 0;
  int pending = 0;
  std::size_t o = grouped / 8 * static_cast<std::size_t>(bits);
  for (std::size_t i = grouped; i < n; ++i) {
    acc |= (codes[i] & mask) << pending;
    pending += bits;
    while (pending >= 8) {
      out[o++] = static_cast<std::uint8_t>(acc);
      acc >>= 8;
      pending -= 8;
    }
  }
  if (pending > 0) out[o] = static_cast<std::uint8_t>(acc);
}

void unpack_kernel(const std::uint8_t* bytes, int bits, std::uint32_t* out, std::size_t n) {
  const std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
  if (bits == 8 || bits == 16 || bits == 32) {
    const int w = bits / 8;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t v = 0;
      for (int b = 0; b < w; ++b)
        v |= std::uint32_t{bytes[i * static_cast<std::size_t>(w) + static_cast<std::size_t>(b)]} << (8 * b);
      out[i] = v;
    }
    return;
  }
  if (bits == 4) {
    for (std::size_t i = 0; i < n; ++i) out[i] = (bytes[i / 2] >> (4 * (i % 2))) & 0xFU;
    return;
  }
  const std::size_t grouped =
      for_sub_byte_width(bits, [&]<int B>() { return unpack_groups<B>(bytes, out, n); });
  std::uint64_t acc = 0;
  int pending = 0;
  std::size_t in = grouped / 8 * static_cast<std::size_t>(bits);
  for (std::size_t i = grouped; i < n; ++i) {
    while (pending < bits) {
      acc |= std::uint64_t{bytes[in++]} << pending;
      pending += 8;
    }
    out[i] = static_cast<std::uint32_t>(acc & mask);
    acc >>= bits;
    pending -= bits;
  }
}

}  // namespace

std::size_t packed_bytes(std::size_t count, int bits) {
  return (count * static_cast<std::size_t>(bits) + 7) / 8;
}

void pack_codes_into(std::span<const std::uint32_t> codes, int bits, std::span<std::uint8_t> out) {
  check_bits(bits, "pack_codes");
  if (out.size() != packed_bytes(codes.size(), bits)) {
    throw ShapeError("pack_codes: " + std::to_string(codes.size()) + " codes of " + std::to_string(bits) +
                     " bits take " + std::to_string(packed_bytes(codes.size(), bits)) + " bytes, not " +
                     std::to_string(out.size()));
  }
  pack_kernel(codes.data(), codes.size(), bits, out.data());
}

void unpack_codes_into(std::span<const std::uint8_t> bytes, int bits, std::span<std::uint32_t> out) {
  check_bits(bits, "unpack_codes");
  const std::size_t need = packed_bytes(out.size(), bits);
  if (bytes.size() < need) {
    throw ShapeError("unpack_codes: " + std::to_string(out.size()) + " codes of " + std::to_string(bits) +
                     " bits need " + std::to_string(need) + " bytes, got " + std::to_string(bytes.size()));
  }
  unpack_kernel(bytes.data(), bits, out.data(), out.size());
}

std::vector<std::uint8_t> pack_codes(std::span<const std::uint32_t> codes, int bits) {
  check_bits(bits, "pack_codes");
  std::vector<std::uint8_t> out(packed_bytes(codes.size(), bits), 0);
  pack_kernel(codes.data(), codes.size(), bits, out.data());
  return out;
}

std::vector<std::uint32_t> unpack_codes(std::span<const std::uint8_t> bytes, int bits, std::size_t count) {
  std::vector<std::uint32_t> out(count, 0);
  unpack_codes_into(bytes, bits, std::span<std::uint32_t>(out));
  return out;
}

}  // namespace lpemu::block
