// Checks of raw HDF5 metadata that libhdf5 1.10 decodes without bounds checks (a corrupt byte in
// them made it read or copy out of bounds): variable-length references into the global heap, and
// the attribute messages of version-1 object headers. Formats: "HDF5 File Format Specification
// Version 3.0" (https://docs.hdfgroup.org/hdf5/develop/_f_m_t3.html), sections III.E (global heap),
// IV.A.1.a (version 1 object header) and IV.A.2 (header messages: dataspace 0x0001, datatype 0x0003,
// attribute 0x000C, continuation 0x0010).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace lpemu::io::detail {

/// Throws IoError "FILE:OBJ: WHAT (corrupt file?)" unless each of the `n` 16-byte variable-length
/// references in `refs` (length in elements, collection address, object index; little-endian) is
/// empty or names an object of a well-formed global heap collection inside the file that holds its
/// length times `element_size` bytes (1 for strings). `base` is the file's base address (its user
/// block size).
void check_heap_refs(const std::filesystem::path& file, std::uint64_t base, const std::string& obj,
                     const std::string& refs, std::size_t n, std::uint64_t element_size = 1);

/// Throws IoError unless every attribute message of the object header at `addr` (relative to `base`)
/// lies inside its message with its name, datatype, dataspace and data, and every variable-length
/// string it holds passes check_heap_refs. A version-2 header ("OHDR") is left to libhdf5, which
/// verifies its checksum. Assumes 8-byte addresses and lengths.
void check_attribute_messages(const std::filesystem::path& file, std::uint64_t base, std::uint64_t addr,
                              const std::string& obj);

}  // namespace lpemu::io::detail
