#include "lpemu/block/pack.hpp"

#include <algorithm>
#include <string>

#include "lpemu/error.hpp"

namespace lpemu::block {

std::vector<std::uint8_t> pack_codes(std::span<const std::uint32_t> codes, int bits) {
  if (bits < 1 || bits > 32) throw ShapeError("pack_codes: code width " + std::to_string(bits) + " is not 1..32");
  const std::size_t total_bits = codes.size() * static_cast<std::size_t>(bits);
  std::vector<std::uint8_t> out((total_bits + 7) / 8, 0);
  const std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
  std::size_t pos = 0;
  for (const std::uint32_t code : codes) {
    std::uint64_t v = code & mask;
    for (int done = 0; done < bits;) {
      const std::size_t byte = pos / 8;
      const int off = static_cast<int>(pos % 8);
      const int take = std::min(8 - off, bits - done);
      out[byte] = static_cast<std::uint8_t>(out[byte] | ((v & ((1U << take) - 1U)) << off));
      v >>= take;
      done += take;
      pos += static_cast<std::size_t>(take);
    }
  }
  return out;
}

std::vector<std::uint32_t> unpack_codes(std::span<const std::uint8_t> bytes, int bits, std::size_t count) {
  if (bits < 1 || bits > 32) throw ShapeError("unpack_codes: code width " + std::to_string(bits) + " is not 1..32");
  const std::size_t need = (count * static_cast<std::size_t>(bits) + 7) / 8;
  if (bytes.size() < need) {
    throw ShapeError("unpack_codes: " + std::to_string(count) + " codes of " + std::to_string(bits) + " bits need " +
                     std::to_string(need) + " bytes, got " + std::to_string(bytes.size()));
  }
  std::vector<std::uint32_t> out(count, 0);
  std::size_t pos = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t v = 0;
    for (int done = 0; done < bits;) {
      const std::size_t byte = pos / 8;
      const int off = static_cast<int>(pos % 8);
      const int take = std::min(8 - off, bits - done);
      v |= static_cast<std::uint64_t>((bytes[byte] >> off) & ((1U << take) - 1U)) << done;
      done += take;
      pos += static_cast<std::size_t>(take);
    }
    out[i] = static_cast<std::uint32_t>(v);
  }
  return out;
}

}  // namespace lpemu::block
