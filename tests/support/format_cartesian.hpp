// Cartesian helpers: a new built-in format, rounding mode or overflow policy is
// then tested everywhere automatically.
#pragma once

#include "lpemu/format/format.hpp"
#include "lpemu/format/registry.hpp"
#include "lpemu/format/rounding.hpp"

namespace lpemu::test {

/// Calls fn(format) for every built-in format (canonical names, sorted).
template <class Fn>
void for_each_builtin_format(Fn&& fn) {
  const auto& reg = format::Registry::builtin();
  for (const auto& name : reg.names()) fn(reg.get(name));
}

/// Calls fn(mode) for every rounding mode.
template <class Fn>
void for_each_rounding_mode(Fn&& fn) {
  for (const auto m : format::kAllRoundingModes) fn(m);
}

/// Calls fn(policy) for every overflow policy.
template <class Fn>
void for_each_overflow_policy(Fn&& fn) {
  for (const auto p : format::kAllOverflowPolicies) fn(p);
}

}  // namespace lpemu::test
