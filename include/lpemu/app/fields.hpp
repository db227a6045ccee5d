// The one serialised form of every application result: an ordered tree of named fields that the
// JSON printer, the Python module (dicts) and the HDF5/CSV writers all read, so each field has one
// name everywhere.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace lpemu::app {

/// An ordered tree of named fields (numbers keep NaN and ±Inf; JSON text prints them as null).
using Fields = nlohmann::ordered_json;

/// JSON text of `f` on one line (indent < 0) or indented; NaN and ±Inf as null, invalid UTF-8 as
/// U+FFFD.
std::string json_text(const Fields& f, int indent = -1);

/// The scalar leaves of `f` as flat columns, nested names joined by '_' after `prefix`
/// ({"cost": {"tokens_per_s": 1}} -> "cost_tokens_per_s"); arrays are not columns and are skipped.
std::vector<std::pair<std::string, Fields>> columns(const Fields& f, const std::string& prefix = "");

/// Reads a request from named fields (a Python call's keyword arguments): each read() takes one
/// field if present and not null, checking its type (an optional is set only then); finish() rejects names
/// nobody read. Errors are SpecErrors naming `what`, the field and the expected type.
class FieldReader {
 public:
  /// Reads `f` (an object, or null for no fields); `what` names the request in errors.
  FieldReader(const Fields& f, std::string what);
  /// Reads field `name` into `out` if present (strings, integers, reals, booleans, paths and
  /// lists of them).
  template <class T>
  void read(const char* name, T& out);
  /// Throws SpecError naming every field no read() asked for.
  void finish() const;

 private:
  const Fields* take(const char* name);
  [[noreturn]] void wrong(const char* name, const char* expected) const;
  void convert(const char* name, const Fields& v, std::string& out) const;
  void convert(const char* name, const Fields& v, long long& out) const;
  void convert(const char* name, const Fields& v, int& out) const;
  void convert(const char* name, const Fields& v, double& out) const;
  void convert(const char* name, const Fields& v, float& out) const;
  void convert(const char* name, const Fields& v, bool& out) const;
  void convert(const char* name, const Fields& v, std::uint64_t& out) const;
  void convert(const char* name, const Fields& v, std::filesystem::path& out) const;
  template <class T>
  void convert(const char* name, const Fields& v, std::optional<T>& out) const {
    convert(name, v, out.emplace());
  }
  template <class T>
  void convert(const char* name, const Fields& v, std::vector<T>& out) const {
    if (!v.is_array()) wrong(name, "a list");
    out.clear();
    for (const auto& x : v) convert(name, x, out.emplace_back());
  }
  const Fields& fields_;
  std::string what_;
  std::vector<std::string> read_;
};

template <class T>
void FieldReader::read(const char* name, T& out) {
  if (const Fields* v = take(name)) convert(name, *v, out);
}

}  // namespace lpemu::app
