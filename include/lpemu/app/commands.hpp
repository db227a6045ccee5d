// Every application command by name, for front ends that hold requests as named fields (the
// Python module): one table from a command's name to its request reader, function and result
// serialiser.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"

namespace lpemu::app {

/// Runs command `name` on `request` (named fields, as price_request() and its siblings read them)
/// and returns its result's fields; UnknownNameError for an unknown command.
Fields run(experiment::Context& ctx, std::string_view name, const Fields& request);

/// The names run() knows, sorted.
std::vector<std::string> command_names();

}  // namespace lpemu::app
