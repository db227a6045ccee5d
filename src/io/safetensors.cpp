#include "lpemu/io/safetensors.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lpemu/error.hpp"

namespace lpemu::io {
namespace {

namespace fs = std::filesystem;

// Guards against reading a corrupt length as a multi-gigabyte allocation (the format itself
// caps the header at 100 MB: safetensors/src/tensor.rs, MAX_HEADER_SIZE).
constexpr std::uint64_t kMaxHeader = 100'000'000;

[[noreturn]] void fail(const fs::path& f, const std::string& what) {
  throw IoError(f.string() + ": " + what);
}

}  // namespace

std::size_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

SafetensorsFile SafetensorsFile::open(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, "cannot open safetensors file");
  const std::uint64_t file_size = fs::file_size(file);
  unsigned char len_bytes[8];
  if (!in.read(reinterpret_cast<char*>(len_bytes), 8)) fail(file, "shorter than the 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeader || n > file_size - 8) {
    fail(file, "header length " + std::to_string(n) + " exceeds the file (" + std::to_string(file_size) +
                   " bytes) or the 100 MB limit");
  }
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) fail(file, "truncated JSON header");
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(file, std::string("header is not valid JSON: ") + e.what());
  }
  if (!h.is_object()) fail(file, "header is not a JSON object");
  SafetensorsFile s;
  s.path_ = file;
  s.data_offset_ = 8 + n;
  const std::uint64_t data_size = file_size - s.data_offset_;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") continue;
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets") ||
        !v["dtype"].is_string() || !v["shape"].is_array() || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2) {
      fail(file, where + ": expected {\"dtype\": string, \"shape\": [..], \"data_offsets\": [begin, end]}");
    }
    SafetensorsEntry e;
    e.dtype = v["dtype"].get<std::string>();
    std::uint64_t count = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail(file, where + ": shape entries must be non-negative integers");
      e.shape.push_back(d.get<std::size_t>());
      if (e.shape.back() != 0 && count > std::numeric_limits<std::uint64_t>::max() / e.shape.back())
        fail(file, where + ": the shape's element count overflows 64 bits");
      count *= e.shape.back();
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      fail(file, where + ": data_offsets must be non-negative integers");
    }
    e.begin = off[0].get<std::uint64_t>();
    e.end = off[1].get<std::uint64_t>();
    const std::size_t item = safetensors_dtype_size(e.dtype);
    if (item == 0) fail(file, where + ": dtype \"" + e.dtype + "\" is not a known safetensors dtype");
    if (e.end < e.begin || e.end > data_size) {
      fail(file, where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     "] lie outside the data section of " + std::to_string(data_size) + " bytes");
    }
    if (count > std::numeric_limits<std::uint64_t>::max() / item)
      fail(file, where + ": the shape's byte count overflows 64 bits");
    if (e.end - e.begin != count * item) {
      fail(file, where + ": data_offsets span " + std::to_string(e.end - e.begin) + " bytes, expected " +
                     std::to_string(count * item) + " for its shape and dtype " + e.dtype);
    }
    s.entries_.emplace(name, std::move(e));
  }
  // As the reference loader (huggingface/safetensors, safetensors/src/tensor.rs, Metadata::validate):
  // sorted by offset, the tensors tile the data section exactly, no overlap, no gap, no tail.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& [name, e] : s.entries_) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  std::uint64_t at = 0;
  for (const auto& [name, e] : order) {
    if (e->begin != at) {
      fail(file, "tensor '" + *name + "': data_offsets [" + std::to_string(e->begin) + ", " +
                     std::to_string(e->end) + "] " +
                     (e->begin < at ? "overlap the tensor before it" : "leave unused bytes before it") +
                     ": expected it to start at byte " + std::to_string(at));
    }
    at = e->end;
  }
  if (at != data_size) {
    fail(file, "the tensors cover " + std::to_string(at) + " of the " + std::to_string(data_size) +
                   " data bytes: expected them to cover the data section exactly");
  }
  return s;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) fail(path_, "no tensor '" + name + "'");
  return it->second;
}

std::vector<std::uint8_t> SafetensorsFile::read_bytes(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  std::ifstream in(path_, std::ios::binary);
  std::vector<std::uint8_t> out(e.end - e.begin);
  in.seekg(static_cast<std::streamoff>(data_offset_ + e.begin));
  if (!in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()))) {
    fail(path_, "tensor '" + name + "': cannot read its " + std::to_string(out.size()) + " bytes");
  }
  return out;
}

}  // namespace lpemu::io
