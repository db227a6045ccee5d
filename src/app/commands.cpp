#include "lpemu/app/commands.hpp"

#include <algorithm>
#include <functional>
#include <map>

#include "lpemu/app/evaluate.hpp"
#include "lpemu/app/price.hpp"
#include "lpemu/app/replay.hpp"
#include "lpemu/app/sweep.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::app {
namespace {

using Command = std::function<Fields(experiment::Context&, const Fields&)>;

const std::map<std::string, Command, std::less<>>& table() {
  static const std::map<std::string, Command, std::less<>> t = {
      {"cost", [](experiment::Context& c, const Fields& f) { return fields(price(c, price_request(f))); }},
      {"eval", [](experiment::Context& c, const Fields& f) { return fields(evaluate(c, eval_request(f))); }},
      {"sweep", [](experiment::Context& c, const Fields& f) { return fields(sweep(c, sweep_request(f))); }},
      {"replay", [](experiment::Context& c, const Fields& f) { return fields(replay(c, replay_request(f))); }},
  };
  return t;
}

}  // namespace

Fields run(experiment::Context& ctx, std::string_view name, const Fields& request) {
  const auto& t = table();
  const auto it = t.find(name);
  if (it == t.end()) {
    throw UnknownNameError("unknown command '" + std::string(name) + "'" +
                           lpemu::detail::closest_names_hint(name, command_names()));
  }
  return it->second(ctx, request);
}

std::vector<std::string> command_names() {
  std::vector<std::string> out;
  for (const auto& [name, fn] : table()) out.push_back(name);
  return out;
}

}  // namespace lpemu::app
