// `lpemu convert --from F --to G IN OUT`: converts a stream of codes of F into codes of G in
// constant memory. float32 and float64 data are simply codes of fp32 and fp64.
//
// Storage: codes of 8 bits or fewer take one byte each, right-aligned; wider codes take 2, 4 or 8
// little-endian bytes. With --packed, codes narrower than 8 bits are packed densely, LSB first:
// code i occupies stream bits [i·w, (i+1)·w), where stream bit k is bit (k mod 8) of byte k/8 and
// the code's bit 0 comes first (so two FP4 codes share a byte with code 0 in the low nibble).
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "cli/commands.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/npy.hpp"

namespace lpemu::cli {
namespace {

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
      f.specials == format::Specials::ieee && f.is_signed) return "<f4";
  if (f.kind == format::Kind::floating && f.exponent_bits == 11 && f.mantissa_bits == 52 && f.bias == 1023 &&
      f.specials == format::Specials::ieee && f.is_signed) return "<f8";
  if (f.kind == format::Kind::floating && f.exponent_bits == 5 && f.mantissa_bits == 10 && f.bias == 15 &&
      f.specials == format::Specials::ieee && f.is_signed) return "<f2";
  return io::npy_unsigned_dtype(storage_bytes(f));
}

// Reads codes (one per storage unit, or bit-packed) from a stream, chunk by chunk.
class CodeReader {
 public:
  CodeReader(std::istream& in, std::string name, const format::Format& f, bool packed, std::size_t limit)
      : in_(in), name_(std::move(name)), f_(f), packed_(packed && f.bits < 8), limit_(limit) {}

  // Reads up to max codes; returns how many were read (0 at the end).
  std::size_t read(std::vector<std::uint64_t>& codes, std::size_t max) {
    codes.clear();
    if (limit_ != kUnknown) max = std::min(max, limit_ - done_);
    if (max == 0) return 0;
    if (!packed_) {
      const std::size_t w = storage_bytes(f_);
      buf_.resize(max * w);
      in_.read(reinterpret_cast<char*>(buf_.data()), static_cast<std::streamsize>(buf_.size()));
      const auto got = static_cast<std::size_t>(in_.gcount());
      if (got % w != 0) throw IoError("input ends inside a code (" + std::to_string(got % w) + " stray bytes)");
      for (std::size_t i = 0; i < got / w; ++i) {
        std::uint64_t c = 0;
        for (std::size_t b = 0; b < w; ++b) c |= static_cast<std::uint64_t>(buf_[i * w + b]) << (8 * b);
        // A code with bits above the format's width is bad input, never masked.
        if ((c & ~f_.code_mask()) != 0) {
          format::require_code_fits(f_, c, name_ + ": element " + std::to_string(done_ + i) + " (--from " + f_.name + ")");
        }
        codes.push_back(c);
      }
    } else {
      const int w = f_.bits;
      while (codes.size() < max) {
        while (nbits_ < w) {
          const int ch = in_.get();
          if (ch == EOF) break;
          bitbuf_ |= static_cast<std::uint64_t>(ch) << nbits_;
          nbits_ += 8;
        }
        if (nbits_ < w) break;  // trailing bits that do not make a whole code are padding
        codes.push_back(bitbuf_ & f_.code_mask());
        bitbuf_ >>= w;
        nbits_ -= w;
      }
    }
    done_ += codes.size();
    if (limit_ != kUnknown && codes.size() < max) {
      throw IoError("input ends after " + std::to_string(done_) + " of " + std::to_string(limit_) + " elements");
    }
    return codes.size();
  }

  static constexpr std::size_t kUnknown = ~std::size_t{0};

 private:
  std::istream& in_;
  std::string name_;
  const format::Format& f_;
  bool packed_;
  std::size_t limit_;
  std::size_t done_ = 0;
  std::vector<unsigned char> buf_;
  std::uint64_t bitbuf_ = 0;
  int nbits_ = 0;
};

// Writes codes one per storage unit, or bit-packed.
class CodeWriter {
 public:
  CodeWriter(std::ostream& out, const format::Format& f, bool packed)
      : out_(out), f_(f), packed_(packed && f.bits < 8) {}

  void write(const std::vector<std::uint64_t>& codes) {
    buf_.clear();
    if (!packed_) {
      const std::size_t w = storage_bytes(f_);
      for (const auto c : codes) {
        for (std::size_t b = 0; b < w; ++b) buf_.push_back(static_cast<unsigned char>(c >> (8 * b)));
      }
    } else {
      for (const auto c : codes) {
        bitbuf_ |= (c & f_.code_mask()) << nbits_;
        nbits_ += f_.bits;
        while (nbits_ >= 8) {
          buf_.push_back(static_cast<unsigned char>(bitbuf_));
          bitbuf_ >>= 8;
          nbits_ -= 8;
        }
      }
    }
    out_.write(reinterpret_cast<const char*>(buf_.data()), static_cast<std::streamsize>(buf_.size()));
    if (!out_) throw IoError("write failed (disk full or closed pipe?)");
  }

  // Flushes a partial last byte (zero padded).
  void finish() {
    if (packed_ && nbits_ > 0) {
      const auto b = static_cast<char>(bitbuf_);
      out_.write(&b, 1);
      nbits_ = 0;
    }
    out_.flush();
  }

 private:
  std::ostream& out_;
  const format::Format& f_;
  bool packed_;
  std::vector<unsigned char> buf_;
  std::uint64_t bitbuf_ = 0;
  int nbits_ = 0;
};

struct ConvertArgs {
  std::string from;
  std::string to;
  std::string in;
  std::string out;
  bool packed = false;
  bool force = false;
  ConvertFlags flags;
};

void run_convert(Context& ctx, const ConvertArgs& a) {
  ctx.apply_threads();
  format::ConvertOptions opts = a.flags.options();
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
      if (h.dtype == "<f4") from = "fp32";
      else if (h.dtype == "<f8") from = "fp64";
      else if (h.dtype == "<f2") from = "fp16";
      else throw Error(a.in + ": dtype '" + h.dtype + "' holds codes: say which format with --from");
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
      throw Error(a.in + ": dtype '" + h.dtype + "' has " + std::to_string(h.item_size()) + "-byte items but '" +
                  src.name + "' codes take " + std::to_string(probe.item_size()) + " bytes (" + probe.dtype + ")");
    }
  }
  if (count == CodeReader::kUnknown && a.in != "-") {
    const std::size_t bytes = io::input_size(a.in);
    if (bytes == std::numeric_limits<std::size_t>::max()) {
      throw IoError(a.in + ": not a regular file; pipe a stream through stdin ('-') instead");
    }
    count = (a.packed && src.bits < 8) ? (bytes * 8) / static_cast<std::size_t>(src.bits) : bytes / storage_bytes(src);
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
  std::vector<std::uint64_t> codes;
  std::vector<std::uint64_t> out_codes;
  std::vector<double> values;
  std::size_t done = 0;
  while (reader.read(codes, kChunk) > 0) {
    values.resize(codes.size());
    out_codes.resize(codes.size());
    // Decode the source exactly into doubles (exact for every format up to E11M52).
    format::decode(src, std::span<const std::uint64_t>(codes), std::span<double>(values));
    if (daz) {
      for (auto& v : values) {
        if (std::fabs(v) < src.min_normal) v = std::copysign(0.0, v);
      }
    }
    opts.index_offset = done;
    if (format::fits_in_float(src) && src.kind == format::Kind::floating) {
      // Every value is a float: take the vectorised float32 path.
      std::vector<float> fv(values.begin(), values.end());
      std::vector<std::uint32_t> c32(fv.size());
      if (dst.bits <= 32) {
        format::encode(dst, std::span<const float>(fv), std::span<std::uint32_t>(c32), opts);
        for (std::size_t i = 0; i < c32.size(); ++i) out_codes[i] = c32[i];
      } else {
        format::encode(dst, std::span<const double>(values), std::span<std::uint64_t>(out_codes), opts);
      }
    } else {
      format::encode(dst, std::span<const double>(values), std::span<std::uint64_t>(out_codes), opts);
    }
    writer.write(out_codes);
    done += codes.size();
  }
  writer.finish();
  if (out_npy && count == CodeReader::kUnknown) {
    // Streamed from stdin: rewrite the header now that the count is known.
    out->seekp(0);
    io::write_npy_header(*out, npy_dtype_for(dst), {done});
  }
  if (fout) fout->commit();
  if (a.out != "-") {
    std::cerr << "lpemu: converted " << done << " elements from " << src.name << " to " << dst.name << " into "
              << a.out << "\n";
  }
}

}  // namespace

void register_convert(CLI::App& app, Context& ctx) {
  static ConvertArgs args;
  auto* sub = app.add_subcommand("convert", "convert a stream of values or codes between two formats");
  sub->add_option("--from", args.from, "source format (default from a .npy float dtype: fp32/fp64/fp16)");
  sub->add_option("--to", args.to, "destination format")->required();
  sub->add_flag("--packed", args.packed, "codes narrower than 8 bits are bit-packed, LSB first (raw streams)");
  sub->add_flag("--force", args.force, "overwrite OUT if it exists");
  args.flags.add_to(sub);
  sub->add_option("IN", args.in, "input: FILE.npy, a raw little-endian FILE, or - for stdin")->required();
  sub->add_option("OUT", args.out, "output: FILE.npy, a raw FILE, or - for stdout")->required();
  sub->callback([&ctx] { run_convert(ctx, args); });
}

}  // namespace lpemu::cli
