// Text helpers shared by the proposal writers (src/experiment/proposal*.cpp); private.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "lpemu/block/block_format.hpp"
#include "lpemu/datapath/datapath.hpp"
#include "lpemu/experiment/proposal.hpp"

namespace lpemu::experiment::detail {

/// Shortest decimal that reads back as the same double ("nan", "-inf" for specials).
std::string real(double v);
/// Shortest decimal that reads back as the same float.
std::string real_float(float v);
/// "0x" and `digits` lower-case hex digits (more if needed).
std::string hex(std::uint64_t v, int digits);
/// Appends v in hex (`digits` digits at least, no 0x) to `out`, after a space unless `out` is empty.
void append_hex(std::string& out, std::uint64_t v, int digits);
/// Space-separated hex of each value, `digits` digits each (no 0x): codes, scales, bytes.
template <class T>
std::string hex_list(std::span<const T> v, int digits) {
  std::string out;
  for (const T x : v) append_hex(out, static_cast<std::uint64_t>(x), digits);
  return out;
}
/// Space-separated float32 bit patterns (8 hex digits each).
std::string float_bits_list(std::span<const float> v);
/// Writes `text` to `p`; throws IoError naming the file.
void write_text(const std::filesystem::path& p, const std::string& text);
/// Splits one CSV line on commas (no quoting: proposal files never quote).
std::vector<std::string> split_csv(const std::string& line);

/// The block-format section of spec.md: element, scale, scale rule, layout and packing.
std::string block_spec_markdown(const block::BlockFormat& f);
/// Writes blocks.csv; returns its path.
std::filesystem::path write_block_vectors(const std::filesystem::path& dir, const block::BlockFormat& f,
                                          std::uint64_t seed);
/// The datapath section of spec.md.
std::string datapath_spec_markdown(const datapath::Datapath& dp);
/// Writes dot.csv; returns its path.
std::filesystem::path write_dot_vectors(const std::filesystem::path& dir, const datapath::Datapath& dp,
                                        std::uint64_t seed);
/// Runs the accuracy sweep into dir/accuracy and writes dir/summary.md; returns the files written.
std::vector<std::filesystem::path> write_accuracy(const std::filesystem::path& dir,
                                                  const ProposalRequest& req);

}  // namespace lpemu::experiment::detail
