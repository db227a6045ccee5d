#include "lpemu/io/npy.hpp"

#include <algorithm>

#include <cstring>
#include <fstream>
#include <istream>
#include <ostream>

#include "lpemu/error.hpp"

namespace lpemu::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kHeaderPad = 128;  // fixed header size we write, room for a rewrite

}  // namespace

std::size_t NpyHeader::count() const {
  std::size_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

std::size_t NpyHeader::item_size() const {
  std::size_t bytes = 0;
  for (std::size_t i = 2; i < dtype.size(); ++i) bytes = bytes * 10 + static_cast<std::size_t>(dtype[i] - '0');
  return bytes;
}

NpyHeader read_npy_header(std::istream& in, const std::string& name) {
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 6) != 0) {
    throw IoError(name + ": not a .npy file (missing \\x93NUMPY magic)");
  }
  const int major = static_cast<unsigned char>(magic[6]);
  std::size_t hlen = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!in.read(reinterpret_cast<char*>(b), 2)) throw IoError(name + ": truncated .npy header");
    hlen = b[0] | (static_cast<std::size_t>(b[1]) << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) throw IoError(name + ": truncated .npy header");
    hlen = b[0] | (static_cast<std::size_t>(b[1]) << 8) | (static_cast<std::size_t>(b[2]) << 16) |
           (static_cast<std::size_t>(b[3]) << 24);
  } else {
    throw IoError(name + ": unsupported .npy version " + std::to_string(major));
  }
  if (hlen > (1U << 20)) throw IoError(name + ": .npy header length " + std::to_string(hlen) + " is implausible");
  std::string header(hlen, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(hlen))) throw IoError(name + ": truncated .npy header");
  NpyHeader h;
  h.data_offset = (major == 1 ? 10 : 12) + hlen;
  // The header is a Python dict literal: find each key's value by plain scanning.
  const auto value_after = [&](const std::string& key) -> std::string {
    const auto k = header.find("'" + key + "'");
    if (k == std::string::npos) throw IoError(name + ": .npy header has no '" + key + "'");
    const auto colon = header.find(':', k);
    if (colon == std::string::npos) throw IoError(name + ": malformed .npy header");
    return header.substr(colon + 1);
  };
  const std::string descr = value_after("descr");
  const auto q1 = descr.find('\'');
  const auto q2 = q1 == std::string::npos ? q1 : descr.find('\'', q1 + 1);
  if (q2 == std::string::npos) throw IoError(name + ": malformed 'descr' in .npy header");
  h.dtype = descr.substr(q1 + 1, q2 - q1 - 1);
  const std::string order = value_after("fortran_order");
  if (order.find_first_not_of(' ') != std::string::npos && order.substr(order.find_first_not_of(' '), 4) == "True") {
    throw IoError(name + ": Fortran-order .npy arrays are not supported (save with np.ascontiguousarray)");
  }
  const std::string shape = value_after("shape");
  const auto p1 = shape.find('(');
  const auto p2 = shape.find(')');
  if (p1 == std::string::npos || p2 == std::string::npos || p2 < p1) throw IoError(name + ": malformed 'shape' in .npy header");
  std::size_t cur = 0;
  bool in_num = false;
  for (std::size_t i = p1 + 1; i < p2; ++i) {
    const char c = shape[i];
    if (c >= '0' && c <= '9') {
      cur = cur * 10 + static_cast<std::size_t>(c - '0');
      in_num = true;
    } else if (in_num) {
      h.shape.push_back(cur);
      cur = 0;
      in_num = false;
    }
  }
  if (in_num) h.shape.push_back(cur);
  if (h.dtype.size() < 3 || (h.dtype[0] != '<' && h.dtype[0] != '|') ||
      std::string("fiu").find(h.dtype[1]) == std::string::npos) {
    throw IoError(name + ": .npy dtype '" + h.dtype + "': expected a little-endian numeric dtype such as <f4");
  }
  return h;
}

void write_npy_header(std::ostream& out, const std::string& dtype, const std::vector<std::size_t>& shape) {
  std::string dict = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  dict += "), }";
  const std::size_t total = kHeaderPad;
  if (dict.size() + 11 > total) throw IoError(".npy header too long for shape");
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  out.write(kMagic, 6);
  const char ver[2] = {1, 0};
  out.write(ver, 2);
  const auto hlen = static_cast<std::uint16_t>(dict.size());
  const char len[2] = {static_cast<char>(hlen & 0xff), static_cast<char>(hlen >> 8)};
  out.write(len, 2);
  out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
}

std::string npy_unsigned_dtype(std::size_t bytes) {
  return bytes == 1 ? "|u1" : "<u" + std::to_string(bytes);
}

std::vector<float> read_npy_floats(const std::filesystem::path& file, std::vector<std::size_t>& shape) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file.string() + ": cannot open");
  const NpyHeader h = read_npy_header(in, file.string());
  if (h.dtype != "<f4" && h.dtype != "<f8") {
    throw IoError(file.string() + ": dtype '" + h.dtype + "': expected float32 (<f4) or float64 (<f8)");
  }
  shape = h.shape;
  const std::size_t n = h.count();
  std::vector<float> out(n);
  if (h.dtype == "<f4") {
    if (!in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n * 4))) {
      throw IoError(file.string() + ": truncated data (expected " + std::to_string(n) + " float32 values)");
    }
  } else {
    std::vector<double> d(n);
    if (!in.read(reinterpret_cast<char*>(d.data()), static_cast<std::streamsize>(n * 8))) {
      throw IoError(file.string() + ": truncated data (expected " + std::to_string(n) + " float64 values)");
    }
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(d[i]);
  }
  return out;
}

std::vector<std::int64_t> read_npy_ints(const std::filesystem::path& file, std::vector<std::size_t>& shape) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file.string() + ": cannot open");
  const NpyHeader h = read_npy_header(in, file.string());
  static const char* const kInts[] = {"|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8"};
  if (std::find(std::begin(kInts), std::end(kInts), h.dtype) == std::end(kInts)) {
    throw IoError(file.string() + ": dtype '" + h.dtype + "': expected a little-endian integer dtype (e.g. <i4, <i8)");
  }
  shape = h.shape;
  const std::size_t n = h.count();
  const std::size_t w = h.item_size();
  std::vector<unsigned char> raw(n * w);
  if (!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()))) {
    throw IoError(file.string() + ": truncated data (expected " + std::to_string(n) + " integers)");
  }
  const bool is_signed = h.dtype[1] == 'i';
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t u = 0;
    for (std::size_t b = 0; b < w; ++b) u |= static_cast<std::uint64_t>(raw[i * w + b]) << (8 * b);
    if (is_signed && w < 8 && (u >> (8 * w - 1)) != 0) u |= ~std::uint64_t{0} << (8 * w);  // sign-extend
    out[i] = static_cast<std::int64_t>(u);
  }
  return out;
}

void write_npy_floats(const std::filesystem::path& file, const std::vector<std::size_t>& shape, const float* data) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) throw IoError(file.string() + ": cannot open for writing");
  write_npy_header(out, "<f4", shape);
  std::size_t n = 1;
  for (const auto d : shape) n *= d;
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * 4));
  if (!out) throw IoError(file.string() + ": write failed");
}

}  // namespace lpemu::io
