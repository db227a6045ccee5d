#include "lpemu/app/commands.hpp"

#include <algorithm>
#include <functional>
#include <map>

#include "lpemu/app/convert.hpp"
#include "lpemu/app/core.hpp"
#include "lpemu/app/datapath.hpp"
#include "lpemu/app/evaluate.hpp"
#include "lpemu/app/formats.hpp"
#include "lpemu/app/gemm.hpp"
#include "lpemu/app/generate.hpp"
#include "lpemu/app/import.hpp"
#include "lpemu/app/price.hpp"
#include "lpemu/app/proposal.hpp"
#include "lpemu/app/quantize.hpp"
#include "lpemu/app/replay.hpp"
#include "lpemu/app/sweep.hpp"
#include "lpemu/app/train.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"

namespace lpemu::app {
namespace {

using Command = std::function<Fields(experiment::Context&, const Fields&)>;

const std::map<std::string, Command, std::less<>>& table() {
  static const std::map<std::string, Command, std::less<>> t = {
      {"core",
       [](experiment::Context& c, const Fields& f) { return fields(simulate_core(c, core_request(f))); }},
      {"cost", [](experiment::Context& c, const Fields& f) { return fields(price(c, price_request(f))); }},
      {"cost mac",
       [](experiment::Context& c, const Fields& f) { return fields(price_mac(c, mac_request(f))); }},
      {"cost targets",
       [](experiment::Context& c, const Fields& f) { return fields(list_targets(c, targets_request(f))); }},
      {"sweep merge",
       [](experiment::Context&, const Fields& f) { return fields(sweep_merge(merge_request(f))); }},
      {"eval", [](experiment::Context& c, const Fields& f) { return fields(evaluate(c, eval_request(f))); }},
      {"sweep", [](experiment::Context& c, const Fields& f) { return fields(sweep(c, sweep_request(f))); }},
      {"replay",
       [](experiment::Context& c, const Fields& f) { return fields(replay(c, replay_request(f))); }},
      {"convert",
       [](experiment::Context& c, const Fields& f) { return fields(convert(c, convert_request(f))); }},
      {"quantize",
       [](experiment::Context& c, const Fields& f) { return fields(quantize(c, quantize_request(f))); }},
      {"train", [](experiment::Context& c, const Fields& f) { return fields(train(c, train_request(f))); }},
      {"formats list", [](experiment::Context& c,
                          const Fields& f) { return fields(formats_list(c, formats_list_request(f))); }},
      {"formats show", [](experiment::Context& c,
                          const Fields& f) { return fields(format_show(c, format_show_request(f))); }},
      {"encode",
       [](experiment::Context& c, const Fields& f) { return fields(encode(c, encode_request(f))); }},
      {"dot", [](experiment::Context& c, const Fields& f) { return fields(dot(c, dot_request(f))); }},
      {"datapath-error",
       [](experiment::Context& c, const Fields& f) {
         return fields(datapath_error(c, datapath_error_request(f)));
       }},
      {"datapath list", [](experiment::Context& c,
                           const Fields& f) { return fields(datapath_list(c, datapath_list_request(f))); }},
      {"datapath show", [](experiment::Context& c,
                           const Fields& f) { return fields(datapath_show(c, datapath_show_request(f))); }},
      {"gemm", [](experiment::Context& c, const Fields& f) { return fields(gemm(c, gemm_request(f))); }},
      {"import", [](experiment::Context& c,
                    const Fields& f) { return fields(import_checkpoint(c, import_request(f))); }},
      {"proposal",
       [](experiment::Context& c, const Fields& f) { return fields(proposal(c, proposal_request(f))); }},
      {"proposal verify",
       [](experiment::Context& c, const Fields& f) { return fields(verify(c, verify_request(f))); }},
      {"run",
       [](experiment::Context& c, const Fields& f) { return fields(generate(c, generate_request(f))); }},
      {"decode",
       [](experiment::Context& c, const Fields& f) { return fields(decode(c, decode_request(f))); }},
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
