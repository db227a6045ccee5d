#include "lpemu/io/npy.hpp"

#include <algorithm>

#include <cstring>
#include <fstream>
#include <istream>
#include <ostream>

#include "lpemu/error.hpp"
#include "lpemu/io/output.hpp"

namespace lpemu::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kHeaderPad = 128;  // fixed header size we write, room for a rewrite

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// Parses the header, a Python dict literal with exactly the keys 'descr' (a string),
// 'fortran_order' (True/False) and 'shape' (a tuple of non-negative integers), as NumPy's
// format.py writes it (NEP 1, "A Simple File Format for NumPy Arrays"). Anything else is an error.
void parse_header_dict(const std::string& text, const std::string& name, NpyHeader& h) {
  std::size_t i = 0;
  const auto bad = [&](const std::string& what) -> IoError {
    return IoError(name + ": malformed .npy header at byte " + std::to_string(i) + ": " + what + " in \"" +
                   text.substr(0, text.find_last_not_of(" \n") + 1) + "\"");
  };
  const auto skip = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t')) ++i;
  };
  const auto expect = [&](char c) {
    skip();
    if (i >= text.size() || text[i] != c) throw bad(std::string("expected '") + c + "'");
    ++i;
  };
  const auto string_lit = [&] {
    skip();
    if (i >= text.size() || (text[i] != '\'' && text[i] != '"')) throw bad("expected a quoted string");
    const char q = text[i++];
    const auto close = text.find(q, i);
    if (close == std::string::npos) throw bad("unterminated string");
    std::string v = text.substr(i, close - i);
    i = close + 1;
    return v;
  };
  bool have_descr = false, have_order = false, have_shape = false;
  expect('{');
  for (;;) {
    skip();
    if (i < text.size() && text[i] == '}') break;
    const std::string key = string_lit();
    expect(':');
    skip();
    if (key == "descr" && !have_descr) {
      h.dtype = string_lit();
      have_descr = true;
    } else if (key == "fortran_order" && !have_order) {
      if (text.compare(i, 5, "False") == 0) {
        i += 5;
      } else if (text.compare(i, 4, "True") == 0) {
        throw IoError(name +
                      ": Fortran-order .npy arrays are not supported (save with np.ascontiguousarray)");
      } else {
        throw bad("'fortran_order' must be True or False");
      }
      have_order = true;
    } else if (key == "shape" && !have_shape) {
      expect('(');
      for (;;) {
        skip();
        if (i < text.size() && text[i] == ')') break;
        const std::size_t start = i;
        std::size_t v = 0;
        while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
          if (__builtin_mul_overflow(v, std::size_t{10}, &v) ||
              __builtin_add_overflow(v, static_cast<std::size_t>(text[i] - '0'), &v)) {
            throw bad("dimension does not fit in 64 bits");
          }
          ++i;
        }
        if (i == start) throw bad("'shape' must be a tuple of non-negative integers");
        h.shape.push_back(v);
        skip();
        if (i < text.size() && text[i] == ',') {
          ++i;
        } else if (i < text.size() && text[i] == ')') {
          if (h.shape.size() == 1) throw bad("a 1-element shape tuple needs a trailing comma");
          break;
        } else {
          throw bad("'shape' must be a tuple of non-negative integers");
        }
      }
      ++i;
      have_shape = true;
    } else {
      throw bad("unexpected or repeated key '" + key + "'");
    }
    skip();
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    skip();
    if (i < text.size() && text[i] == '}') break;
    throw bad("expected ',' or '}'");
  }
  ++i;
  skip();
  if (i != text.size()) throw bad("trailing bytes after the dict");
  if (!have_descr || !have_order || !have_shape) {
    throw IoError(name + ": .npy header needs 'descr', 'fortran_order' and 'shape'");
  }
}

}  // namespace

std::size_t NpyHeader::count() const {
  std::size_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

std::size_t NpyHeader::item_size() const {
  std::size_t bytes = 0;
  for (std::size_t i = 2; i < dtype.size(); ++i)
    bytes = bytes * 10 + static_cast<std::size_t>(dtype[i] - '0');
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
  if (hlen > (1U << 20))
    throw IoError(name + ": .npy header length " + std::to_string(hlen) + " is implausible");
  std::string header(hlen, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(hlen)))
    throw IoError(name + ": truncated .npy header");
  NpyHeader h;
  h.data_offset = (major == 1 ? 10 : 12) + hlen;
  parse_header_dict(header, name, h);
  if (h.dtype.size() < 3 || (h.dtype[0] != '<' && h.dtype[0] != '|') ||
      std::string("fiu").find(h.dtype[1]) == std::string::npos ||
      h.dtype.find_first_not_of("0123456789", 2) != std::string::npos || h.dtype.size() > 3 ||
      std::string("1248").find(h.dtype[2]) == std::string::npos) {
    throw IoError(name + ": .npy dtype '" + h.dtype +
                  "': expected a little-endian numeric dtype such as <f4");
  }
  std::size_t bytes = h.item_size();
  for (const auto d : h.shape) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) {
      throw IoError(name + ": .npy shape " + shape_text(h.shape) + " of " + h.dtype +
                    " overflows the address space");
    }
  }
  // A seekable input (a file) must hold the declared data: check before anyone allocates for it.
  const auto here = in.tellg();
  if (here != std::streampos(-1) && in.seekg(0, std::ios::end)) {
    const auto end = static_cast<std::size_t>(in.tellg());
    in.seekg(here);
    const std::size_t have = end - static_cast<std::size_t>(here);
    if (have < bytes) {
      throw IoError(name + ": .npy shape " + shape_text(h.shape) + " of " + h.dtype + " declares " +
                    std::to_string(bytes) + " data bytes but the file holds " + std::to_string(have));
    }
  } else {
    in.clear();
  }
  return h;
}

void write_npy_header(std::ostream& out, const std::string& dtype, const std::vector<std::size_t>& shape) {
  std::string dict = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i)
    dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
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
  std::ifstream in = open_input(file);
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
    throw IoError(file.string() + ": dtype '" + h.dtype +
                  "': expected a little-endian integer dtype (e.g. <i4, <i8)");
  }
  shape = h.shape;
  const std::size_t n = h.count();
  const std::size_t w = h.item_size();
  if (std::filesystem::file_size(file) < h.data_offset + n * w) {  // checked before allocating
    throw IoError(file.string() + ": truncated data (expected " + std::to_string(n) + " integers)");
  }
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

void write_npy_floats(const std::filesystem::path& file, const std::vector<std::size_t>& shape,
                      const float* data, const OutputPolicy& policy) {
  AtomicFile f(file, policy);
  write_npy_header(f.stream(), "<f4", shape);
  std::size_t n = 1;
  for (const auto d : shape) n *= d;
  f.stream().write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * 4));
  f.commit();
}

}  // namespace lpemu::io
