#include "lpemu/app/fields.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "lpemu/error.hpp"

namespace lpemu::app {
namespace {

void flatten(const Fields& f, const std::string& name, std::vector<std::pair<std::string, Fields>>& out) {
  if (f.is_array()) return;
  if (!f.is_object()) {
    out.emplace_back(name, f);
    return;
  }
  for (const auto& [key, value] : f.items()) flatten(value, name.empty() ? key : name + "_" + key, out);
}

}  // namespace

std::string json_text(const Fields& f, int indent) {
  return f.dump(indent, ' ', false, Fields::error_handler_t::replace);
}

std::vector<std::pair<std::string, Fields>> columns(const Fields& f, const std::string& prefix) {
  std::vector<std::pair<std::string, Fields>> out;
  flatten(f, prefix, out);
  return out;
}

FieldReader::FieldReader(const Fields& f, std::string what) : fields_(f), what_(std::move(what)) {
  if (!f.is_null() && !f.is_object()) throw SpecError(what_ + ": expected named fields");
}

const Fields* FieldReader::take(const char* name) {
  read_.emplace_back(name);
  if (!fields_.is_object()) return nullptr;
  const auto it = fields_.find(name);
  return it == fields_.end() || it->is_null() ? nullptr : &*it;
}

void FieldReader::wrong(const char* name, const char* expected) const {
  throw SpecError(what_ + ": " + name + " = " + json_text(fields_.at(name)) + ": expected " + expected);
}

void FieldReader::convert(const char* name, const Fields& v, std::string& out) const {
  if (!v.is_string()) wrong(name, "a string");
  out = v.get<std::string>();
}

void FieldReader::convert(const char* name, const Fields& v, long long& out) const {
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<long long>::max()))
    wrong(name, "an integer that fits 64 bits");
  if (!v.is_number_integer() || v.is_boolean()) wrong(name, "an integer");
  out = v.get<long long>();
}

void FieldReader::convert(const char* name, const Fields& v, int& out) const {
  long long x = 0;
  convert(name, v, x);
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    wrong(name, "an integer that fits 32 bits");
  out = static_cast<int>(x);
}

void FieldReader::convert(const char* name, const Fields& v, std::uint64_t& out) const {
  if (v.is_number_unsigned()) {
    out = v.get<std::uint64_t>();
    return;
  }
  if (!v.is_number_integer() || v.get<long long>() < 0) wrong(name, "an integer >= 0");
  out = static_cast<std::uint64_t>(v.get<long long>());
}

void FieldReader::convert(const char* name, const Fields& v, double& out) const {
  if (!v.is_number()) wrong(name, "a number");
  out = v.get<double>();
}

void FieldReader::convert(const char* name, const Fields& v, float& out) const {
  double x = 0;
  convert(name, v, x);
  out = static_cast<float>(x);
}

void FieldReader::convert(const char* name, const Fields& v, bool& out) const {
  if (!v.is_boolean()) wrong(name, "true or false");
  out = v.get<bool>();
}

void FieldReader::convert(const char* name, const Fields& v, std::filesystem::path& out) const {
  std::string s;
  convert(name, v, s);
  out = s;
}

void FieldReader::finish() const {
  if (!fields_.is_object()) return;
  std::string unknown;
  for (const auto& [key, value] : fields_.items()) {
    if (std::find(read_.begin(), read_.end(), key) == read_.end())
      unknown += (unknown.empty() ? "" : ", ") + key;
  }
  if (unknown.empty()) return;
  std::string known;
  for (const auto& k : read_) known += (known.empty() ? "" : ", ") + k;
  throw SpecError(what_ + ": unknown field(s) " + unknown + " (expected: " + known + ")");
}

}  // namespace lpemu::app
