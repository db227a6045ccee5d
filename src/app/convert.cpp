#include "lpemu/app/convert.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include "lpemu/app/options.hpp"
#include "lpemu/block/pack.hpp"
#include "lpemu/error.hpp"
#include "lpemu/format/codec.hpp"
#include "lpemu/io/npy.hpp"
#include "lpemu/io/output.hpp"

namespace lpemu::app {
namespace {

// Codes per chunk: 64 Ki (256 KiB of float32, so a chunk's buffers stay in a core's L2), a
// multiple of 8 so that packed chunks end on a byte boundary.
constexpr std::size_t kChunk = std::size_t{1} << 16;

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

// A reusable buffer that is never zero-filled: every element used is written first (by read() or
// a kernel). Its storage is a byte array, which holds objects of any trivial type (C++20).
class Scratch {
 public:
  // At least `bytes` bytes, suitably aligned for any scalar.
  std::byte* bytes(std::size_t bytes) {
    if (bytes > size_) {
      data_.reset(new std::byte[bytes]);
      size_ = bytes;
    }
    return data_.get();
  }
  // `n` elements of T.
  template <class T>
  std::span<T> as(std::size_t n) {
    return {reinterpret_cast<T*>(bytes(n * sizeof(T))), n};
  }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t size_ = 0;
};

// One chunk on its way through the pipeline: the bytes read (`in`), the bytes to write (`out`),
// and scratch.
struct Chunk {
  std::size_t first = 0;  // element index of the chunk's first code
  std::size_t n = 0;      // codes in the chunk
  std::size_t max = 0;    // codes asked for (n is smaller only at the end of the input)
  std::uint64_t at = 0;   // where the chunk starts in an input file
  std::size_t want = 0;   // bytes asked for
  std::size_t in_bytes = 0;
  std::size_t out_bytes = 0;
  std::exception_ptr error;  // raised when the chunk's turn to be written comes, so errors come in order
  Scratch in, out, host, codes, values, wide;
};

// Reads the input chunk by chunk, in order, as raw bytes: n codes of the source's storage width,
// or packed. Throws at stray bytes and at an input shorter than its declared length. A stream is
// read in next(); a regular file is only portioned out there, and each chunk is read by fill() in
// the pipeline's parallel stage, so that the copies out of the page cache run on every core.
class ChunkReader {
 public:
  // Reads `in`, `limit` codes (kUnknown: to its end).
  ChunkReader(std::istream& in, const format::Format& f, bool packed, std::size_t limit)
      : in_(&in), f_(f), packed_(packed && f.bits < 8), limit_(limit) {}
  // Reads `limit` codes of `file` from byte `at` on.
  ChunkReader(const io::InputFile& file, std::uint64_t at, const format::Format& f, bool packed,
              std::size_t limit)
      : file_(&file), at_(at), f_(f), packed_(packed && f.bits < 8), limit_(limit) {}

  // Assigns c the next chunk (and reads it from a stream); returns false at the end of the input.
  bool next(Chunk& c) {
    std::size_t max = kChunk;
    if (limit_ != kUnknown) max = std::min(max, limit_ - done_);
    if (max == 0) return false;
    c.first = done_;
    c.max = max;
    c.want = packed_ ? block::packed_bytes(max, f_.bits) : max * storage_bytes(f_);
    c.at = at_;
    if (file_ != nullptr) {
      done_ += max;
      at_ += c.want;
      return true;
    }
    finish(c, read_bytes(*in_, c.in.bytes(c.want), c.want));
    done_ += c.n;
    return c.n > 0;
  }

  // Reads a file's chunk assigned by next() (a no-op for streams); chunks may be filled at once.
  void fill(Chunk& c) const {
    if (file_ != nullptr) finish(c, file_->read_at(c.at, c.in.bytes(c.want), c.want));
  }

  std::size_t done() const { return done_; }
  static constexpr std::size_t kUnknown = ~std::size_t{0};

 private:
  // Sets c's count from the `got` bytes that arrived; throws at stray bytes and short input.
  void finish(Chunk& c, std::size_t got) const {
    std::size_t n = 0;
    if (packed_) {
      n = std::min(c.max, got * 8 / static_cast<std::size_t>(f_.bits));  // trailing bits are padding
    } else {
      n = got / storage_bytes(f_);
      if (got % storage_bytes(f_) != 0)
        throw IoError("input ends inside a code (" + std::to_string(got % storage_bytes(f_)) +
                      " stray bytes)");
    }
    c.n = n;
    c.in_bytes = got;
    if (limit_ != kUnknown && n < c.max) {
      throw IoError("input ends after " + std::to_string(c.first + n) + " of " + std::to_string(limit_) +
                    " elements");
    }
  }

  std::istream* in_ = nullptr;
  const io::InputFile* file_ = nullptr;
  std::uint64_t at_ = 0;
  const format::Format& f_;
  bool packed_;
  std::size_t limit_;
  std::size_t done_ = 0;
};

// Converts one chunk's bytes of source codes into the bytes of destination codes. Stateless, so
// chunks convert in parallel. Floating sources that fit float32 and destinations of up to 32 bits
// take the float32 kernels (fp32 codes are used where they were read); every other pair goes
// through exact doubles and 64-bit codes.
class ChunkConverter {
 public:
  ChunkConverter(std::string name, const format::Format& src, const format::Format& dst, bool packed,
                 const format::ConvertOptions& opts, bool daz)
      : name_(std::move(name)),
        src_(src),
        dst_(dst),
        packed_in_(packed && src.bits < 8),
        packed_out_(packed && dst.bits < 8),
        opts_(opts),
        daz_(daz),
        fast_(src.kind == format::Kind::floating && format::fits_in_float(src) && src.bits <= 32 &&
              dst.bits <= 32),
        src_fp32_(npy_dtype_for(src) == "<f4") {}

  // Converts c.in into c.out (c.out_bytes bytes).
  void run(Chunk& c) const {
    format::ConvertOptions o = opts_;
    o.index_offset = c.first;
    const std::size_t n = c.n;
    const std::size_t w = storage_bytes(src_);
    if (fast_) {
      std::span<const float> v;
      if (src_fp32_ && !daz_) {
        v = std::span<const float>(stored<float, std::uint32_t>(c), n);  // fp32 codes are the values
      } else {
        const auto fv = c.values.as<float>(n);
        if (src_fp32_) {
          std::copy_n(stored<float, std::uint32_t>(c), n, fv.begin());
        } else if (packed_in_ || w == 4) {
          format::decode(src_, codes32(c), fv);
        } else if (w == 1) {
          const std::span<const std::uint8_t> codes(stored<std::uint8_t, std::uint8_t>(c), n);
          check_fit(codes, c.first);
          format::decode(src_, codes, fv);
        } else {
          const std::span<const std::uint16_t> codes(stored<std::uint16_t, std::uint16_t>(c), n);
          check_fit(codes, c.first);
          format::decode(src_, codes, fv);
        }
        if (daz_) {
          const auto min_normal = static_cast<float>(src_.min_normal);
          for (auto& x : fv) x = std::fabs(x) < min_normal ? std::copysign(0.0F, x) : x;
        }
        v = fv;
      }
      encode_out(c, v, o);
      return;
    }
    // 64-bit codes and exact doubles.
    const auto c64 = c.wide.as<std::uint64_t>(n);
    if (w == 8) {
      std::copy_n(stored<std::uint64_t, std::uint64_t>(c), n, c64.begin());
      if (src_.bits < 64) check_fit(std::span<const std::uint64_t>(c64), c.first);
    } else {
      const auto codes = codes32(c);
      std::copy(codes.begin(), codes.end(), c64.begin());
    }
    const auto values = c.values.as<double>(n);
    format::decode(src_, std::span<const std::uint64_t>(c64), values);
    if (daz_) {
      for (auto& x : values) {
        if (std::fabs(x) < src_.min_normal) x = std::copysign(0.0, x);
      }
    }
    if (format::fits_in_float(src_) && src_.kind == format::Kind::floating && dst_.bits <= 32) {
      // Every value is a float: the float32 kernel.
      const auto fv = c.codes.as<float>(n);
      std::copy(values.begin(), values.end(), fv.begin());
      encode_out(c, std::span<const float>(fv), o);
      return;
    }
    format::encode(dst_, std::span<const double>(values), c64, o);
    narrow_out(c, std::span<const std::uint64_t>(c64));
  }

 private:
  // The chunk's n stored values of type T (Bits: the unsigned type of its storage) in host order:
  // where they were read on little-endian hosts, else a byte-swapped copy.
  template <class T, class Bits>
  const T* stored(Chunk& c) const {
    static_assert(sizeof(T) == sizeof(Bits));
    if constexpr (std::endian::native == std::endian::little) {
      return reinterpret_cast<const T*>(c.in.bytes(0));
    } else {
      const auto copy = c.host.as<Bits>(c.n);
      std::memcpy(copy.data(), c.in.bytes(0), c.n * sizeof(T));
      to_little_endian(copy);
      return reinterpret_cast<const T*>(copy.data());
    }
  }

  // The chunk's source codes as 32-bit codes (formats up to 32 bits), checked against the width.
  std::span<const std::uint32_t> codes32(Chunk& c) const {
    const std::size_t n = c.n;
    const std::size_t w = storage_bytes(src_);
    const std::byte* in = c.in.bytes(0);
    if (packed_in_) {
      const auto codes = c.codes.as<std::uint32_t>(n);
      block::unpack_codes_into(
          std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(in), c.in_bytes), src_.bits,
          codes);
      return codes;
    }
    if (w == 4) {
      const std::span<const std::uint32_t> codes(stored<std::uint32_t, std::uint32_t>(c), n);
      if (src_.bits < 32) check_fit(codes, c.first);
      return codes;
    }
    const auto codes = c.codes.as<std::uint32_t>(n);
    const auto* b = reinterpret_cast<const std::uint8_t*>(in);
    if (w == 1) {
      for (std::size_t i = 0; i < n; ++i) codes[i] = b[i];
    } else {
      for (std::size_t i = 0; i < n; ++i)
        codes[i] = std::uint32_t{b[2 * i]} | std::uint32_t{b[2 * i + 1]} << 8;
    }
    if (static_cast<std::size_t>(src_.bits) < 8 * w)
      check_fit(std::span<const std::uint32_t>(codes), c.first);
    return codes;
  }

  // Throws for the first code with bits above the format's width (one OR pass when all fit): a
  // code with stray high bits is bad input, never masked.
  template <class C>
  void check_fit(std::span<const C> codes, std::size_t first) const {
    const auto extra = static_cast<C>(~src_.code_mask());
    C any = 0;
    for (const C x : codes) any |= x & extra;
    if (any == 0) return;
    const auto bad = std::find_if(codes.begin(), codes.end(), [&](C x) { return (x & extra) != 0; });
    const auto i = static_cast<std::size_t>(bad - codes.begin());
    format::require_code_fits(
        src_, *bad, name_ + ": element " + std::to_string(first + i) + " (--from " + src_.name + ")");
  }

  // Encodes floats straight into the output bytes (packing codes narrower than 8 bits if asked).
  void encode_out(Chunk& c, std::span<const float> v, const format::ConvertOptions& o) const {
    const std::size_t n = v.size();
    const std::size_t w = storage_bytes(dst_);
    if (packed_out_) {
      const auto codes = c.wide.as<std::uint32_t>(n);
      format::encode(dst_, v, codes, o);
      pack_out(c, codes);
    } else if (w == 1) {
      format::encode(dst_, v, c.out.as<std::uint8_t>(n), o);
      c.out_bytes = n;
    } else if (w == 2) {
      const auto codes = c.out.as<std::uint16_t>(n);
      format::encode(dst_, v, codes, o);
      to_little_endian(codes);
      c.out_bytes = 2 * n;
    } else {
      const auto codes = c.out.as<std::uint32_t>(n);
      format::encode(dst_, v, codes, o);
      to_little_endian(codes);
      c.out_bytes = 4 * n;
    }
  }

  // 64-bit codes narrowed to the destination's storage width (or packed).
  void narrow_out(Chunk& c, std::span<const std::uint64_t> codes) const {
    const std::size_t n = codes.size();
    const std::size_t w = storage_bytes(dst_);
    if (packed_out_) {
      const auto c32 = c.codes.as<std::uint32_t>(n);
      std::copy(codes.begin(), codes.end(), c32.begin());
      pack_out(c, c32);
      return;
    }
    auto* out = reinterpret_cast<std::uint8_t*>(c.out.bytes(n * w));
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t b = 0; b < w; ++b) out[i * w + b] = static_cast<std::uint8_t>(codes[i] >> (8 * b));
    }
    c.out_bytes = n * w;
  }

  void pack_out(Chunk& c, std::span<const std::uint32_t> codes) const {
    c.out_bytes = block::packed_bytes(codes.size(), dst_.bits);
    block::pack_codes_into(codes, dst_.bits, c.out.as<std::uint8_t>(c.out_bytes));
  }

  std::string name_;
  const format::Format& src_;
  const format::Format& dst_;
  bool packed_in_;
  bool packed_out_;
  format::ConvertOptions opts_;
  bool daz_;
  bool fast_;
  bool src_fp32_;
};

}  // namespace

ConvertResult convert(experiment::Context& ctx, const ConvertRequest& a) {
  format::ConvertOptions opts = a.options;
  const bool daz = opts.flush_subnormal_inputs;
  opts.flush_subnormal_inputs = false;  // applied against the source format below

  // Input stream and its element count, if known.
  std::unique_ptr<std::ifstream> fin;
  std::istream* in = &std::cin;
  std::size_t count = ChunkReader::kUnknown;
  std::string from = a.from;
  const bool in_npy = ends_with(a.input, ".npy");
  if (a.input != "-") {
    fin = std::make_unique<std::ifstream>(io::open_input(a.input));
    in = fin.get();
  }
  std::vector<std::size_t> shape;
  if (in_npy) {
    if (a.packed) throw SpecError("--packed applies to raw streams, not to .npy input '" + a.input + "'");
    const io::NpyHeader h = io::read_npy_header(*in, a.input);
    if (from.empty()) {
      if (h.dtype == "<f4")
        from = "fp32";
      else if (h.dtype == "<f8")
        from = "fp64";
      else if (h.dtype == "<f2")
        from = "fp16";
      else
        throw SpecError(a.input + ": dtype '" + h.dtype + "' holds codes: say which format with --from");
    }
    count = h.count();
    shape = h.shape;
  }
  if (from.empty()) throw SpecError("--from is required for raw input (e.g. --from fp32 for float32 values)");
  const auto& src = ctx.formats().get(from);
  const auto& dst = ctx.formats().get(a.to);
  if (in_npy) {
    // The header's item size must match the source's code storage.
    io::NpyHeader probe;
    probe.dtype = npy_dtype_for(src);
    std::ifstream again = io::open_input(a.input);
    const io::NpyHeader h = io::read_npy_header(again, a.input);
    if (h.item_size() != probe.item_size()) {
      throw SpecError(a.input + ": dtype '" + h.dtype + "' has " + std::to_string(h.item_size()) +
                      "-byte items but '" + src.name + "' codes take " + std::to_string(probe.item_size()) +
                      " bytes (" + probe.dtype + ")");
    }
  }
  if (count == ChunkReader::kUnknown && a.input != "-") {
    const std::size_t bytes = io::input_size(a.input);
    if (bytes == std::numeric_limits<std::size_t>::max()) {
      throw IoError(a.input + ": not a regular file; pipe a stream through stdin ('-') instead");
    }
    count = (a.packed && src.bits < 8) ? (bytes * 8) / static_cast<std::size_t>(src.bits)
                                       : bytes / storage_bytes(src);
    if (!(a.packed && src.bits < 8) && bytes % storage_bytes(src) != 0) {
      throw IoError(a.input + ": " + std::to_string(bytes) + " bytes is not a whole number of " +
                    std::to_string(storage_bytes(src)) + "-byte '" + src.name + "' codes");
    }
  }

  // Output stream.
  std::unique_ptr<io::AtomicFile> fout;
  std::ostream* out = &std::cout;
  const bool out_npy = ends_with(a.output, ".npy");
  if (a.output != "-") {
    io::OutputPolicy policy{a.force, {}};
    if (a.input != "-") policy.inputs.emplace_back(a.input);
    fout = std::make_unique<io::AtomicFile>(a.output, policy);
    out = &fout->stream();
  }
  if (out_npy) {
    if (a.packed) throw SpecError("--packed applies to raw streams, not to .npy output '" + a.output + "'");
    if (a.output == "-") throw SpecError(".npy output needs a file name, not '-'");
    if (shape.empty()) shape = {count == ChunkReader::kUnknown ? 0 : count};
    io::write_npy_header(*out, npy_dtype_for(dst), shape);
  }

  // Read, convert, write: chunks portioned out in order, read from a regular file and converted in
  // parallel (a stream is read in order), written in order; as many in flight as there are
  // threads (two per thread, so that I/O overlaps conversion).
  std::unique_ptr<io::InputFile> file;
  std::uint64_t data_at = 0;
  if (a.input != "-" && io::input_size(a.input) != std::numeric_limits<std::size_t>::max()) {
    data_at = static_cast<std::uint64_t>(fin->tellg());  // after the .npy header, if any
    file = std::make_unique<io::InputFile>(a.input);
  }
  ChunkReader reader =
      file ? ChunkReader(*file, data_at, src, a.packed, count) : ChunkReader(*in, src, a.packed, count);
  const std::string out_name = a.output == "-" ? std::string("<stdout>") : a.output;
  const ChunkConverter converter(a.input == "-" ? std::string("stdin") : a.input, src, dst, a.packed, opts,
                                 daz);
  std::vector<Chunk> chunks(2 * static_cast<std::size_t>(tbb::this_task_arena::max_concurrency()) + 1);
  std::size_t next = 0;
  std::atomic<bool> failed = false;
  std::uint64_t in_bytes = 0, out_bytes = 0;
  tbb::parallel_pipeline(
      chunks.size(),
      tbb::make_filter<void, Chunk*>(tbb::filter_mode::serial_in_order, [&](tbb::flow_control& fc) -> Chunk* {
        Chunk& c = chunks[next++ % chunks.size()];
        c.error = nullptr;
        try {
          if (!failed && reader.next(c)) return &c;
        } catch (...) {
          c.error = std::current_exception();
          failed = true;
          return &c;
        }
        fc.stop();
        return nullptr;
      }) & tbb::make_filter<Chunk*, Chunk*>(tbb::filter_mode::parallel, [&](Chunk* c) {
        if (c->error) return c;
        try {
          reader.fill(*c);
          converter.run(*c);
        } catch (...) {
          c->error = std::current_exception();
          failed = true;
        }
        return c;
      }) & tbb::make_filter<Chunk*, void>(tbb::filter_mode::serial_in_order, [&](Chunk* c) {
        if (c->error) std::rethrow_exception(c->error);
        in_bytes += c->in_bytes;
        out_bytes += c->out_bytes;
        out->write(reinterpret_cast<const char*>(c->out.bytes(0)),
                   static_cast<std::streamsize>(c->out_bytes));
        if (!*out) throw IoError(out_name + ": write failed (disk full or closed pipe?)");
      }));
  out->flush();
  if (!*out) throw IoError(out_name + ": write failed (disk full or closed pipe?)");
  const std::size_t done = reader.done();
  if (out_npy && count == ChunkReader::kUnknown) {
    // Streamed from stdin: rewrite the header now that the count is known.
    out->seekp(0);
    io::write_npy_header(*out, npy_dtype_for(dst), {done});
  }
  if (fout) fout->commit();
  ConvertResult r;
  r.from = src.name;
  r.to = dst.name;
  r.input = a.input;
  r.output = a.output;
  r.elements = done;
  r.input_bytes = in_bytes;
  r.output_bytes = out_bytes;
  r.packed = a.packed;
  return r;
}

Fields fields(const ConvertResult& r) {
  return {{"input", r.input},
          {"output", r.output},
          {"from", r.from},
          {"to", r.to},
          {"packed", r.packed},
          {"elements", r.elements},
          {"input_bytes", r.input_bytes},
          {"output_bytes", r.output_bytes}};
}

ConvertRequest convert_request(const Fields& f) {
  ConvertRequest r;
  FieldReader in(f, "convert");
  in.read("from", r.from);
  in.read("to", r.to);
  in.read("input", r.input);
  in.read("output", r.output);
  in.read("packed", r.packed);
  in.read("force", r.force);
  read_convert_options(in, r.options);
  in.finish();
  if (r.to.empty()) throw SpecError("convert: to (the destination format) is required");
  if (r.input.empty()) throw SpecError("convert: input (a file, or \"-\" for standard input) is required");
  if (r.output.empty()) throw SpecError("convert: output (a file, or \"-\" for standard output) is required");
  return r;
}

}  // namespace lpemu::app
