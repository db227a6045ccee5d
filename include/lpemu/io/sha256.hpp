// SHA-256 (FIPS 180-4) of bytes and files, for proposal manifests.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace lpemu::io {

/// Lower-case hex SHA-256 of `data`.
std::string sha256_hex(std::string_view data);
/// Lower-case hex SHA-256 of a file's contents; throws IoError if it cannot be read.
std::string sha256_file(const std::filesystem::path& file);

}  // namespace lpemu::io
