#include "io/h5_check.hpp"

#include <fstream>
#include <limits>
#include <map>
#include <vector>

#include "lpemu/error.hpp"

namespace lpemu::io::detail {
namespace {

[[noreturn]] void corrupt(const std::filesystem::path& file, const std::string& obj,
                          const std::string& what) {
  throw IoError(file.string() + ":" + obj + ": " + what + " (corrupt file?)");
}

std::uint64_t le(const std::string& b, std::size_t off, std::size_t len) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < len; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(b[off + i])) << (8 * i);
  return v;
}

std::uint64_t align8(std::uint64_t n) { return (n + 7) / 8 * 8; }

// Bounded reads of the file's bytes.
class Bytes {
 public:
  Bytes(const std::filesystem::path& file, const std::string& obj)
      : file_(file), obj_(obj), in_(file, std::ios::binary), size_(std::filesystem::file_size(file)) {}

  std::uint64_t size() const { return size_; }

  // `len` bytes at `off`; a range outside the file is corrupt.
  std::string read(std::uint64_t off, std::uint64_t len, const char* what) {
    if (off > size_ || len > size_ - off) corrupt(file_, obj_, std::string(what) + " lies outside the file");
    std::string b(static_cast<std::size_t>(len), '\0');
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(off));
    in_.read(b.data(), static_cast<std::streamsize>(len));
    if (static_cast<std::uint64_t>(in_.gcount()) != len)
      corrupt(file_, obj_, std::string("cannot read ") + what);
    return b;
  }

 private:
  const std::filesystem::path& file_;
  const std::string& obj_;
  std::ifstream in_;
  std::uint64_t size_;
};

// One attribute message (IV.A.2.m): version 1 pads name, datatype and dataspace to 8 bytes;
// versions 2 and 3 do not (3 adds a character-set byte).
void check_attribute(const std::filesystem::path& file, std::uint64_t base, const std::string& obj,
                     const std::string& m, unsigned flags) {
  const auto bad = [&](const std::string& what) { corrupt(file, obj, "attribute message: " + what); };
  if ((flags & 0x02U) != 0) bad("stored as a shared message, which lpemu does not read");
  if (m.size() < 8) bad("shorter than its fixed fields");
  const unsigned version = static_cast<unsigned char>(m[0]);
  if (version < 1 || version > 3) bad("version " + std::to_string(version) + ": expected 1, 2 or 3");
  if (version >= 2 && (static_cast<unsigned char>(m[1]) & 0x03U) != 0) bad("shared datatype or dataspace");
  const std::uint64_t name_size = le(m, 2, 2), type_size = le(m, 4, 2), space_size = le(m, 6, 2);
  const auto pad = [&](std::uint64_t n) { return version == 1 ? align8(n) : n; };
  std::uint64_t at = version == 3 ? 9 : 8;
  const std::uint64_t name_at = at;
  at += pad(name_size);
  const std::uint64_t type_at = at;
  at += pad(type_size);
  const std::uint64_t space_at = at;
  at += pad(space_size);
  if (name_size < 1 || at > m.size()) bad("name, datatype and dataspace overrun the message");
  if (m[name_at + name_size - 1] != '\0') bad("name is not null-terminated");
  // Datatype (IV.A.2.d): class in the low 4 bits of byte 0, element size in bytes 4..7.
  if (type_size < 8) bad("datatype shorter than 8 bytes");
  const unsigned type_class = static_cast<unsigned char>(m[type_at]) & 0x0FU;
  const std::uint64_t element = le(m, type_at + 4, 4);
  if (type_class > 10) bad("datatype class " + std::to_string(type_class));
  // Dataspace (IV.A.2.b): version 1 has dimensions from byte 8, version 2 from byte 4 after a type.
  if (space_size < 4) bad("dataspace shorter than 4 bytes");
  const unsigned space_version = static_cast<unsigned char>(m[space_at]);
  const unsigned rank = static_cast<unsigned char>(m[space_at + 1]);
  const unsigned space_flags = static_cast<unsigned char>(m[space_at + 2]);
  if (space_version < 1 || space_version > 2 || rank > 32) bad("dataspace version or rank out of range");
  const std::uint64_t dims_at = space_at + (space_version == 1 ? 8 : 4);
  const std::uint64_t dims_bytes = std::uint64_t{rank} * 8 * ((space_flags & 0x01U) != 0 ? 2 : 1);
  if (dims_at - space_at + dims_bytes > space_size) bad("dataspace dimensions overrun the dataspace");
  std::uint64_t count = space_version == 2 && static_cast<unsigned char>(m[space_at + 3]) == 2 ? 0 : 1;
  for (unsigned i = 0; i < rank && count != 0; ++i) {
    const std::uint64_t d = le(m, dims_at + 8 * i, 8);
    if (d != 0 && count > std::numeric_limits<std::uint64_t>::max() / d)
      bad("element count overflows 64 bits");
    count *= d;
  }
  if (count != 0 && element > (m.size() - at) / count) {
    bad(std::to_string(count) + " elements of " + std::to_string(element) + " bytes overrun the message");
  }
  // Variable-length data (class 9) are references into the global heap, 16 bytes each on disk.
  // Its base type (IV.A.2.d, variable-length properties) follows the 8-byte header; each element of
  // a sequence has the base type's size (libhdf5 sizes its conversion buffers by it).
  if (type_class == 9 && count != 0) {
    if (type_size < 16) bad("variable-length datatype without a base type");
    if (count > (m.size() - at) / 16) bad("variable-length references overrun the message");
    check_heap_refs(file, base, obj, m.substr(at, count * 16), count, le(m, type_at + 12, 4));
  }
}

}  // namespace

void check_heap_refs(const std::filesystem::path& file, std::uint64_t base, const std::string& obj,
                     const std::string& refs, std::size_t n, std::uint64_t element_size) {
  Bytes in(file, obj);
  const std::uint64_t file_bytes = in.size();
  if (base > file_bytes) corrupt(file, obj, "user block larger than the file");
  std::map<std::uint64_t, std::map<std::uint64_t, std::uint64_t>> collections;  // address -> index -> size
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t len = le(refs, i * 16, 4), addr = le(refs, i * 16 + 4, 8),
                        index = le(refs, i * 16 + 12, 4);
    if (len == 0 && addr == 0) continue;  // an empty (null) string
    const std::string where = "string " + std::to_string(i);
    if (addr > file_bytes - base || file_bytes - base - addr < 16)
      corrupt(file, obj, where + ": heap address outside the file");
    auto [it, fresh] = collections.try_emplace(addr);
    if (fresh) {
      const std::string head = in.read(base + addr, 16, "a global heap collection");
      const std::uint64_t size = le(head, 8, 8);
      if (head.compare(0, 4, "GCOL") != 0 || head[4] != 1 || size < 16 || size > file_bytes - base - addr) {
        corrupt(file, obj, where + ": no valid global heap collection at its address");
      }
      const std::string heap = in.read(base + addr, size, "a global heap collection");
      for (std::uint64_t pos = 16; pos + 16 <= size;) {
        const std::uint64_t idx = le(heap, pos, 2), bytes = le(heap, pos + 8, 8);
        if (idx == 0) break;  // free space: the rest of the collection
        if (bytes > size - pos - 16)
          corrupt(file, obj, where + ": heap object " + std::to_string(idx) + " overruns its collection");
        it->second[idx] = bytes;
        pos += 16 + align8(bytes);
      }
    }
    const auto found = it->second.find(index);
    if (found == it->second.end() || element_size == 0 || len > found->second / element_size)
      corrupt(file, obj, where + ": reference to a missing or shorter heap object");
  }
}

void check_attribute_messages(const std::filesystem::path& file, std::uint64_t base, std::uint64_t addr,
                              const std::string& obj) {
  Bytes in(file, obj);
  if (base > in.size() || addr > in.size() - base)
    corrupt(file, obj, "object header address outside the file");
  const std::string prefix = in.read(base + addr, 16, "the object header");
  if (prefix.compare(0, 4, "OHDR") == 0) return;  // version 2: checksummed, verified by libhdf5
  if (prefix[0] != 1)
    corrupt(file, obj, "object header version " + std::to_string(int(prefix[0])) + ": expected 1 or 2");
  // Chunks of messages: the first follows the 16-byte prefix; continuation messages add more.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> chunks{{base + addr + 16, le(prefix, 8, 4)}};
  constexpr std::size_t kMaxChunks = 4096;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    if (c >= kMaxChunks) corrupt(file, obj, "more than 4096 object header chunks");
    const std::string chunk = in.read(chunks[c].first, chunks[c].second, "an object header chunk");
    for (std::uint64_t pos = 0; pos + 8 <= chunk.size();) {
      const std::uint64_t type = le(chunk, pos, 2), size = le(chunk, pos + 2, 2);
      const unsigned flags = static_cast<unsigned char>(chunk[pos + 4]);
      if (size > chunk.size() - pos - 8) corrupt(file, obj, "a header message overruns its chunk");
      const std::string m = chunk.substr(pos + 8, size);
      if (type == 0x000C) check_attribute(file, base, obj, m, flags);
      if (type == 0x0011) {
        // Symbol table message (IV.A.2.r): the group's v1 B-tree ("TREE", III.A.1) and local heap
        // ("HEAP", III.D) must be in the file; libhdf5 1.10 read a B-tree at an address of
        // 0xffffffffffffffff from a null buffer (SIGSEGV in H5F__accum_read).
        if (size < 16) corrupt(file, obj, "symbol table message shorter than 16 bytes");
        const std::pair<std::uint64_t, const char*> parts[] = {{le(m, 0, 8), "TREE"}, {le(m, 8, 8), "HEAP"}};
        for (const auto& [at, signature] : parts) {
          if (at > in.size() - base || in.size() - base - at < 8 ||
              in.read(base + at, 4, "a group's B-tree or local heap") != signature) {
            corrupt(file, obj, std::string("symbol table message: no ") + signature + " at its address");
          }
        }
      }
      if (type == 0x0010) {
        if (size < 16) corrupt(file, obj, "continuation message shorter than 16 bytes");
        const std::uint64_t at = le(m, 0, 8), len = le(m, 8, 8);
        if (at > in.size() - base) corrupt(file, obj, "continuation chunk outside the file");
        chunks.emplace_back(base + at, len);
      }
      pos += 8 + size;
    }
  }
}

}  // namespace lpemu::io::detail
