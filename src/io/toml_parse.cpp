// The one call of toml::parse. toml++ 3.3 checks its parser's invariants with
// TOML_ASSERT_ASSUME, which under NDEBUG is __builtin_assume with clang (undefined behaviour when
// a malformed document breaks one, e.g. `aliases = ["a",}` or a broken table header; found by the
// fuzzers) and nothing at all with g++. Here NDEBUG is off and TOML_ASSERT records the first
// broken check instead of asserting (some of toml++'s checks sit in noexcept functions, so they
// cannot throw); parsing goes on as in a g++ NDEBUG build, and parse() then reports the document
// as a syntax error. toml++'s implementation (TOML_IMPLEMENTATION) is compiled only in this
// translation unit, and every loader parses through io::detail::parse.
#undef NDEBUG
#define TOML_IMPLEMENTATION 1

namespace lpemu::io::detail {
/// The first toml++ check that failed during the current parse on this thread (nullptr: none).
inline thread_local const char* toml_broken_check = nullptr;
}  // namespace lpemu::io::detail

#define TOML_ASSERT(expr)                                                           \
  ((expr) ? static_cast<void>(0)                                                    \
          : static_cast<void>(::lpemu::io::detail::toml_broken_check =              \
                                  ::lpemu::io::detail::toml_broken_check != nullptr \
                                      ? ::lpemu::io::detail::toml_broken_check      \
                                      : #expr))

#include <string>
#include <string_view>

#include "io/toml_util.hpp"

namespace lpemu::io::detail {

toml::table parse(std::string_view text, std::string_view origin) {
  // A UTF-8 byte-order mark at the start is not part of the document (editors on Windows write
  // one; toml++ skips it too): dropped before the ASCII pre-check, which would refuse it.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  check_ascii_outside_strings(text, origin);
  toml_broken_check = nullptr;
  const auto broken = [&]() -> SpecError {
    const char* check = toml_broken_check;
    toml_broken_check = nullptr;
    return SpecError(std::string(origin) +
                     ": not valid TOML: the parser met a malformed construct (toml++ check '" + check +
                     "' failed)");
  };
  try {
    toml::table t = toml::parse(text, origin);
    if (toml_broken_check != nullptr) throw broken();
    return t;
  } catch (const toml::parse_error& e) {
    if (toml_broken_check != nullptr) throw broken();
    throw SpecError(std::string(origin) + ":" + std::to_string(e.source().begin.line) +
                    ": not valid TOML: " + std::string(e.description()));
  }
}

}  // namespace lpemu::io::detail
