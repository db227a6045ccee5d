// `lpemu convert --from F --to G IN OUT`: converts a stream of codes of F into codes of G in
// constant memory. float32 and float64 data are simply codes of fp32 and fp64.
//
// Storage: codes of 8 bits or fewer take one byte each, right-aligned; wider codes take 2, 4 or 8
// little-endian bytes. With --packed, codes narrower than 8 bits are packed densely, LSB first:
// code i occupies stream bits [i·w, (i+1)·w), where stream bit k is bit (k mod 8) of byte k/8 and
// the code's bit 0 comes first (so two FP4 codes share a byte with code 0 in the low nibble).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "lpemu/block/pack.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/npy.hpp"

namespace lpemu::cli {
namespace {

// Codes per chunk: 4 MiB of float32, a multiple of 8 (packed chunks end on a byte boundary).
constexpr std::size_t kChunk = std::size_t{1} << 20;

std::size_t storage_bytes(const format::Format& f) {
  return f.bits <= 8 ? 1 : f.bits <= 16 ? 2 : f.bits <= 32 ? 4 : 8;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The .npy dtype a format's codes are written with.
std::string npy_dtype_for(const format::Format& f) {
  if (f.kind == format::Kind::floating && f.exponent_bits == 8 && f.mantissa_bits == 23 && f.bias == 127 &&
      f.specials == format::Specials::ieee && f.is_signed)
    return "<f4";
  if (f.kind == format::Kind::floating && f.exponent_bits == 11 && f.mantissa_bits == 52 && f.bias == 1023 &&
      f.specials == format::Specials::ieee && f.is_signed)
    return "<f8";
  if (f.kind == format::Kind::floating && f.exponent_bits == 5 && f.mantissa_bits == 10 && f.bias == 15 &&
      f.specials == format::Specials::ieee && f.is_signed)
    return "<f2";
  return io::npy_unsigned_dtype(storage_bytes(f));
}

// Host byte order to little-endian storage and back (a no-op on little-endian hosts).
template <class T>
void to_little_endian(std::span<T> v) {
  if constexpr (std::endian::native != std::endian::little) {
    for (auto& x : v) {
      T y = 0;
      for (std::size_t b = 0; b < sizeof(T); ++b) y = static_cast<T>((y << 8) | ((x >> (8 * b)) & 0xFF));
      x = y;
    }
  }
}

// Reads up to `bytes` bytes; returns how many arrived (short only at the end of the stream).
std::size_t read_bytes(std::istream& in, void* to, std::size_t bytes) {
  in.read(static_cast<char*>(to), static_cast<std::streamsize>(bytes));
  return static_cast<std::size_t>(in.gcount());
}

// Reads codes chunk by chunk into 32-bit (formats up to 32 bits) or 64-bit code buffers: a raw
// read into the storage width, then one widening pass, or the block layer's unpacker for packed
// streams. Chunks hold a multiple of 8 codes, so packed chunks end on byte boundaries.
class CodeReader {
 public:
  CodeReader(std::istream& in, std::string name, const format::Format& f, bool packed, std::size_t limit)
      : in_(in), name_(std::move(name)), f_(f), packed_(packed && f.bits < 8), limit_(limit) {}

  // Reads up to max codes into c32 (f.bits <= 32) or c64; returns how many (0 at the end).
  std::size_t read(std::vector<std::uint32_t>& c32, std::vector<std::uint64_t>& c64, std::size_t max) {
    if (limit_ != kUnknown) max = std::min(max, limit_ - done_);
    if (max == 0) return 0;
    std::size_t n = 0;
    if (packed_) {
      bytes_.resize(block::packed_bytes(max, f_.bits));
      const std::size_t got = read_bytes(in_, bytes_.data(), bytes_.size());
      n = std::min(max, got * 8 / static_cast<std::size_t>(f_.bits));  // trailing bits are padding
      c32.resize(n);
      block::unpack_codes_into(std::span<const std::uint8_t>(bytes_.data(), got), f_.bits,
                               std::span<std::uint32_t>(c32));
    } else {
      const std::size_t w = storage_bytes(f_);
      std::size_t got = 0;
      if (w == 4) {
        c32.resize(max);
        got = read_bytes(in_, c32.data(), max * 4);
        n = got / 4;
        c32.resize(n);
        to_little_endian(std::span<std::uint32_t>(c32));
      } else if (w == 8) {
        c64.resize(max);
        got = read_bytes(in_, c64.data(), max * 8);
        n = got / 8;
        c64.resize(n);
        to_little_endian(std::span<std::uint64_t>(c64));
      } else {
        bytes_.resize(max * w);
        got = read_bytes(in_, bytes_.data(), bytes_.size());
        n = got / w;
        c32.resize(n);
        if (w == 1) {
          for (std::size_t i = 0; i < n; ++i) c32[i] = bytes_[i];
        } else {
          for (std::size_t i = 0; i < n; ++i)
            c32[i] = std::uint32_t{bytes_[2 * i]} | std::uint32_t{bytes_[2 * i + 1]} << 8;
        }
      }
      if (got % w != 0)
        throw IoError("input ends inside a code (" + std::to_string(got % w) + " stray bytes)");
      // A code with bits above the format's width is bad input, never masked.
      if (8 * w > static_cast<std::size_t>(f_.bits)) {
        if (w == 8) {
          check_fit(std::span<const std::uint64_t>(c64));
        } else {
          check_fit(std::span<const std::uint32_t>(c32));
        }
      }
    }
    done_ += n;
    if (limit_ != kUnknown && n < max) {
      throw IoError("input ends after " + std::to_string(done_) + " of " + std::to_string(limit_) +
                    " elements");
    }
    return n;
  }

  static constexpr std::size_t kUnknown = ~std::size_t{0};

 private:
  // Throws for the first code with bits above the format's width (one OR pass when all fit).
  template <class C>
  void check_fit(std::span<const C> codes) const {
    const auto extra = static_cast<C>(~f_.code_mask());
    C any = 0;
    for (const C c : codes) any |= c & extra;
    if (any == 0) return;
    const auto bad = std::find_if(codes.begin(), codes.end(), [&](C c) { return (c & extra) != 0; });
    const auto i = static_cast<std::size_t>(bad - codes.begin());
    format::require_code_fits(f_, *bad,
                              name_ + ": element " + std::to_string(done_ + i) + " (--from " + f_.name + ")");
  }

  std::istream& in_;
  std::string name_;
  const format::Format& f_;
  bool packed_;
  std::size_t limit_;
  std::size_t done_ = 0;
  std::vector<std::uint8_t> bytes_;
};

// Writes codes one per storage unit, or bit-packed by the block layer's packer.
class CodeWriter {
 public:
  CodeWriter(std::ostream& out, const format::Format& f, bool packed)
      : out_(out), f_(f), packed_(packed && f.bits < 8) {}

  // Codes already in their storage width (uint8/16/32/64 for 1/2/4/8 bytes; uint32 when packed).
  template <class Code>
  void write(std::span<Code> codes) {
    if (packed_) {
      if constexpr (std::is_same_v<Code, std::uint32_t>) {
        bytes_.resize(block::packed_bytes(codes.size(), f_.bits));
        block::pack_codes_into(codes, f_.bits, std::span<std::uint8_t>(bytes_));
        put(bytes_.data(), bytes_.size());
        return;
      }
    }
    to_little_endian(codes);
    put(codes.data(), codes.size_bytes());
  }

  // 64-bit codes narrowed to the format's storage width.
  void write_wide(const std::vector<std::uint64_t>& codes) {
    const std::size_t w = storage_bytes(f_);
    if (w == 8 && !packed_) {
      std::vector<std::uint64_t> c = codes;
      write(std::span<std::uint64_t>(c));
      return;
    }
    if (packed_ || w == 4) {
      std::vector<std::uint32_t> c(codes.begin(), codes.end());
      write(std::span<std::uint32_t>(c));
      return;
    }
    bytes_.resize(codes.size() * w);
    for (std::size_t i = 0; i < codes.size(); ++i) {
      for (std::size_t b = 0; b < w; ++b) bytes_[i * w + b] = static_cast<std::uint8_t>(codes[i] >> (8 * b));
    }
    put(bytes_.data(), bytes_.size());
  }

  void finish() { out_.flush(); }

 private:
  void put(const void* p, std::size_t n) {
    out_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    if (!out_) throw IoError("write failed (disk full or closed pipe?)");
  }

  std::ostream& out_;
  const format::Format& f_;
  bool packed_;
  std::vector<std::uint8_t> bytes_;
};

// Encodes float values into the destination's storage codes and writes them.
template <class Code>
void encode_and_write(const format::Format& dst, std::span<const float> v, const format::ConvertOptions& o,
                      std::vector<Code>& buf, CodeWriter& w) {
  buf.resize(v.size());
  format::encode(dst, v, std::span<Code>(buf), o);
  w.write(std::span<Code>(buf));
}

struct ConvertArgs {
  std::string from;
  std::string to;
  std::string in;
  std::string out;
  bool packed = false;
  bool force = false;
  format::ConvertOptions convert;
};

void run_convert(Context& ctx, const ConvertArgs& a) {
  ctx.apply_threads();
  format::ConvertOptions opts = a.convert;
  const bool daz = opts.flush_subnormal_inputs;
  opts.flush_subnormal_inputs = false;  // applied against the source format below

  // Input stream and its element count, if known.
  std::unique_ptr<std::ifstream> fin;
  std::istream* in = &std::cin;
  std::size_t count = CodeReader::kUnknown;
  std::string from = a.from;
  const bool in_npy = ends_with(a.in, ".npy");
  if (a.in != "-") {
    fin = std::make_unique<std::ifstream>(io::open_input(a.in));
    in = fin.get();
  }
  std::vector<std::size_t> shape;
  if (in_npy) {
    if (a.packed) throw Error("--packed applies to raw streams, not to .npy input '" + a.in + "'");
    const io::NpyHeader h = io::read_npy_header(*in, a.in);
    if (from.empty()) {
      if (h.dtype == "<f4")
        from = "fp32";
      else if (h.dtype == "<f8")
        from = "fp64";
      else if (h.dtype == "<f2")
        from = "fp16";
      else
        throw Error(a.in + ": dtype '" + h.dtype + "' holds codes: say which format with --from");
    }
    count = h.count();
    shape = h.shape;
  }
  if (from.empty()) throw Error("--from is required for raw input (e.g. --from fp32 for float32 values)");
  const auto& src = ctx.formats().get(from);
  const auto& dst = ctx.formats().get(a.to);
  if (in_npy) {
    // The header's item size must match the source's code storage.
    io::NpyHeader probe;
    probe.dtype = npy_dtype_for(src);
    std::ifstream again = io::open_input(a.in);
    const io::NpyHeader h = io::read_npy_header(again, a.in);
    if (h.item_size() != probe.item_size()) {
      throw Error(a.in + ": dtype '" + h.dtype + "' has " + std::to_string(h.item_size()) +
                  "-byte items but '" + src.name + "' codes take " + std::to_string(probe.item_size()) +
                  " bytes (" + probe.dtype + ")");
    }
  }
  if (count == CodeReader::kUnknown && a.in != "-") {
    const std::size_t bytes = io::input_size(a.in);
    if (bytes == std::numeric_limits<std::size_t>::max()) {
      throw IoError(a.in + ": not a regular file; pipe a stream through stdin ('-') instead");
    }
    count = (a.packed && src.bits < 8) ? (bytes * 8) / static_cast<std::size_t>(src.bits)
                                       : bytes / storage_bytes(src);
    if (!(a.packed && src.bits < 8) && bytes % storage_bytes(src) != 0) {
      throw IoError(a.in + ": " + std::to_string(bytes) + " bytes is not a whole number of " +
                    std::to_string(storage_bytes(src)) + "-byte '" + src.name + "' codes");
    }
  }

  // Output stream.
  std::unique_ptr<io::AtomicFile> fout;
  std::ostream* out = &std::cout;
  const bool out_npy = ends_with(a.out, ".npy");
  if (a.out != "-") {
    io::OutputPolicy policy{a.force, {}};
    if (a.in != "-") policy.inputs.emplace_back(a.in);
    fout = std::make_unique<io::AtomicFile>(a.out, policy);
    out = &fout->stream();
  }
  if (out_npy) {
    if (a.packed) throw Error("--packed applies to raw streams, not to .npy output '" + a.out + "'");
    if (a.out == "-") throw Error(".npy output needs a file name, not '-'");
    if (shape.empty()) shape = {count == CodeReader::kUnknown ? 0 : count};
    io::write_npy_header(*out, npy_dtype_for(dst), shape);
  }

  CodeReader reader(*in, a.in == "-" ? std::string("stdin") : a.in, src, a.packed, count);
  CodeWriter writer(*out, dst, a.packed);
  // float32 fast path: the source's values are floats (fp32 codes are taken as they are, other
  // formats decoded in bulk) and the destination's codes fit 32 bits; every other pair goes
  // through exact doubles and 64-bit codes.
  const bool src_fp32 = npy_dtype_for(src) == "<f4";
  const bool fast =
      src.kind == format::Kind::floating && format::fits_in_float(src) && src.bits <= 32 && dst.bits <= 32;
  const bool packed_out = a.packed && dst.bits < 8;
  const auto min_normal = static_cast<float>(src.min_normal);
  std::vector<std::uint32_t> c32;
  std::vector<std::uint64_t> c64;
  std::vector<float> fv;
  std::vector<double> values;
  std::vector<std::uint64_t> out_codes;
  std::vector<std::uint8_t> o8;
  std::vector<std::uint16_t> o16;
  std::vector<std::uint32_t> o32;
  std::size_t done = 0;
  while (std::size_t n = reader.read(c32, c64, kChunk)) {
    opts.index_offset = done;
    if (fast) {
      fv.resize(n);
      if (src_fp32) {
        std::memcpy(fv.data(), c32.data(), n * sizeof(float));
      } else {
        format::decode(src, std::span<const std::uint32_t>(c32), std::span<float>(fv));
      }
      if (daz) {
        for (auto& v : fv) v = std::fabs(v) < min_normal ? std::copysign(0.0F, v) : v;
      }
      const std::span<const float> v(fv);
      const std::size_t w = storage_bytes(dst);
      if (packed_out || w == 4) {
        encode_and_write(dst, v, opts, o32, writer);
      } else if (w == 1) {
        encode_and_write(dst, v, opts, o8, writer);
      } else {
        encode_and_write(dst, v, opts, o16, writer);
      }
    } else {
      if (src.bits <= 32) c64.assign(c32.begin(), c32.end());
      values.resize(n);
      out_codes.resize(n);
      // Decode the source exactly into doubles (exact for every format up to E11M52).
      format::decode(src, std::span<const std::uint64_t>(c64), std::span<double>(values));
      if (daz) {
        for (auto& v : values) {
          if (std::fabs(v) < src.min_normal) v = std::copysign(0.0, v);
        }
      }
      if (format::fits_in_float(src) && src.kind == format::Kind::floating && dst.bits <= 32) {
        // Every value is a float: the float32 kernel.
        fv.assign(values.begin(), values.end());
        o32.resize(n);
        format::encode(dst, std::span<const float>(fv), std::span<std::uint32_t>(o32), opts);
        out_codes.assign(o32.begin(), o32.end());
      } else {
        format::encode(dst, std::span<const double>(values), std::span<std::uint64_t>(out_codes), opts);
      }
      writer.write_wide(out_codes);
    }
    done += n;
  }
  writer.finish();
  if (out_npy && count == CodeReader::kUnknown) {
    // Streamed from stdin: rewrite the header now that the count is known.
    out->seekp(0);
    io::write_npy_header(*out, npy_dtype_for(dst), {done});
  }
  if (fout) fout->commit();
  if (a.out != "-") {
    std::cerr << "lpemu: converted " << done << " elements from " << src.name << " to " << dst.name
              << " into " << a.out << "\n";
  }
}

}  // namespace

void register_convert(CLI::App& app, Context& ctx) {
  static ConvertArgs args;
  auto* sub = app.add_subcommand("convert", "convert a stream of values or codes between two formats");
  sub->add_option("--from", args.from, "source format (default from a .npy float dtype: fp32/fp64/fp16)");
  sub->add_option("--to", args.to, "destination format")->required();
  sub->add_flag("--packed", args.packed,
                "codes narrower than 8 bits are bit-packed, LSB first (raw streams)");
  sub->add_flag("--force", args.force, "overwrite OUT if it exists");
  add_convert_options(sub, args.convert);
  sub->add_option("IN", args.in, "input: FILE.npy, a raw little-endian FILE, or - for stdin")->required();
  sub->add_option("OUT", args.out, "output: FILE.npy, a raw FILE, or - for stdout")->required();
  sub->callback([&ctx] { run_convert(ctx, args); });
}

}  // namespace lpemu::cli
