// What a proposal is made of: the proposed format and datapath resolved by name or file, with the
// spec texts the package copies (looked up through the registries' origins).
#include <filesystem>

#include "io/toml_util.hpp"
#include "lpemu/detail/named_registry.hpp"
#include "lpemu/detail/names.hpp"
#include "lpemu/error.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/proposal.hpp"
#include "lpemu/format/registry.hpp"

namespace lpemu::experiment {
namespace {

using lpemu::detail::spec_text;

bool is_toml_path(const std::string& s) { return std::filesystem::path(s).extension() == ".toml"; }

}  // namespace

ProposalRequest proposal_request(Context& ctx, const std::string& format_name,
                                 const std::string& datapath_name, bool register_new) {
  ProposalRequest req;
  // The proposed format: an element or block format, by name or file.
  if (is_toml_path(format_name)) {
    req.format_toml = lpemu::detail::read_spec_file(format_name, "format");
    const toml::table t = io::detail::parse(req.format_toml, format_name);
    if (t.contains("element")) {
      req.block = block::parse_block_format_toml(req.format_toml, format_name, ctx.formats());
      if (register_new && ctx.blocks().find(req.block->name) == nullptr)
        ctx.add_block(*req.block, format_name);
    } else {
      req.format = format::parse_format_toml(req.format_toml, format_name);
      if (register_new && ctx.formats().find(req.format.name) == nullptr)
        ctx.add_format(req.format, format_name);
    }
  } else if (const block::BlockFormat* b = ctx.blocks().find(format_name)) {
    req.block = *b;
    req.format_toml = spec_text(ctx.blocks().origin(b->name));
  } else if (ctx.formats().find(format_name) == nullptr) {
    std::vector<std::string> known = ctx.formats().names();
    for (const auto& n : ctx.blocks().names()) known.push_back(n);
    throw UnknownNameError("unknown element or block format '" + format_name + "'" +
                           lpemu::detail::closest_names_hint(format_name, known) +
                           " (see `lpemu formats list`)");
  } else {
    req.format = ctx.formats().get(format_name);
    req.format_toml = spec_text(ctx.formats().origin(req.format.name));
  }
  if (req.block) {
    req.format = req.block->element;
    if (const format::Format* e = ctx.formats().find(req.format.name)) {
      req.element_toml = spec_text(ctx.formats().origin(e->name));
    }
  }
  // The datapath, with its inputs replaced by the proposed element format where they differ.
  if (!datapath_name.empty()) {
    datapath::Datapath dp;
    std::string text;
    std::string origin;
    if (is_toml_path(datapath_name)) {
      text = lpemu::detail::read_spec_file(datapath_name, "datapath");
      origin = datapath_name;
      dp = datapath::parse_datapath_toml(text, origin, ctx.formats());
    } else {
      dp = ctx.datapaths().get(datapath_name);
      origin = ctx.datapaths().origin(dp.name);
      text = spec_text(origin);
    }
    req.datapath = retarget_datapath(dp, req.format);
    req.datapath_toml = req.datapath->name == dp.name || text.empty()
                            ? text
                            : retarget_datapath_toml(text, origin, *req.datapath);
    if (register_new && ctx.datapaths().find(req.datapath->name) == nullptr) {
      ctx.add_datapath(*req.datapath, origin);
    }
  }
  return req;
}

std::vector<std::string> proposal_accuracy_formats(Context& ctx, const ProposalRequest& req) {
  if (req.block) return {req.block->name};
  // The element format alone, and with one FP32 scale per tensor (most formats need one).
  const std::string scaled = req.format.name + "_per_tensor";
  if (ctx.blocks().find(scaled) == nullptr) {
    block::BlockFormat pt = ctx.blocks().get("fp8_e4m3_per_tensor");
    pt.name = scaled;
    pt.aliases.clear();
    pt.element = req.format;
    pt.description =
        req.format.name + " elements with one FP32 scale per tensor (amax / max), written by proposal";
    pt.validate();
    ctx.add_block(std::move(pt), "proposal");
  }
  return {req.format.name, scaled};
}

}  // namespace lpemu::experiment
