#include "lpemu/experiment/context.hpp"

#include <cmath>
#include <cstdlib>

#include "lpemu/error.hpp"

namespace lpemu::experiment {

std::vector<std::filesystem::path> data_search_dirs(std::vector<std::filesystem::path> first) {
  if (const char* env = std::getenv("LPEMU_DATA_DIR")) first.emplace_back(env);
  first.push_back(std::filesystem::current_path());
  return first;
}

void Context::check_open(const char* what) const {
  if (quantizers_ || gemms_ || costs_) {
    throw Error(std::string("cannot add ") + what +
                " after the context's quantizer, GEMM or cost factories were built; add formats first");
  }
}

const format::Registry& Context::formats() {
  if (!formats_) formats_ = format::Registry::with_user_paths(formats_dirs);
  return *formats_;
}

const block::BlockRegistry& Context::blocks() {
  if (!blocks_) blocks_ = block::BlockRegistry::with_user_paths(formats(), formats_dirs);
  return *blocks_;
}

const datapath::DatapathRegistry& Context::datapaths() {
  if (!datapaths_) datapaths_ = datapath::DatapathRegistry::with_user_paths(formats_dirs, formats());
  return *datapaths_;
}

void Context::add_format(format::Format f, std::string origin) {
  check_open("an element format");
  formats();
  formats_->add(std::move(f), std::move(origin));
}

void Context::add_block(block::BlockFormat f, std::string origin) {
  check_open("a block format");
  blocks();
  blocks_->add(std::move(f), std::move(origin));
  block::check_no_element_names(*blocks_, formats());
}

void Context::add_datapath(datapath::Datapath d, std::string origin) {
  check_open("a datapath");
  datapaths();
  datapaths_->add(std::move(d), std::move(origin));
}

const engine::QuantizerFactory& Context::quantizers() {
  if (!quantizers_) quantizers_ = engine::QuantizerFactory::standard(formats(), &blocks());
  return *quantizers_;
}

const engine::GemmFactory& Context::gemms() {
  if (!gemms_) gemms_ = engine::GemmFactory::with_datapaths(datapaths());
  return *gemms_;
}

cost::Catalog& Context::costs() {
  if (!costs_) {
    costs_ = std::make_unique<cost::Catalog>(formats(), formats_dirs, &blocks(), &datapaths());
  }
  return *costs_;
}

const Toolbox& Context::toolbox() {
  if (!toolbox_) {
    Toolbox t;
    t.quantizers = &quantizers();
    t.gemms = &gemms();
    t.costs = &costs();
    t.datapaths = &datapaths();
    for (const auto& d : data_dirs) t.search_dirs.push_back(d.string());
    toolbox_ = std::move(t);
  }
  return *toolbox_;
}

engine::PrecisionPlan Context::load_plan(const std::string& name_or_path) {
  std::vector<std::string> dirs;
  for (const auto& d : data_dirs) dirs.push_back(d.string());
  return engine::load_plan(name_or_path, quantizers(), gemms(), dirs);
}

engine::Model Context::load_model(const std::string& name_or_path) const {
  return engine::load_model(engine::resolve_model_path(name_or_path, data_dirs));
}

}  // namespace lpemu::experiment
