// `lpemu import` and `lpemu.call("import", ...)`: a Hugging Face checkpoint folder written as the
// engine's HDF5 model file.
#pragma once

#include <string>

#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"

namespace lpemu::app {

/// The folder to import and the model file to write.
struct ImportRequest {
  std::string dir;     ///< folder with config.json, *.safetensors and tokenizer.json
  std::string out;     ///< model file to write (.h5)
  bool force = false;  ///< replace an existing `out`
};

/// The imported model's shape.
struct ImportResult {
  std::string architecture, name, out;
  int n_layers = 0, dim = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0;
  bool tokenizer = false;  ///< tokenizer.json was imported
};

/// Imports the checkpoint (never over one of its files); throws lpemu::Error for bad input.
ImportResult import_checkpoint(experiment::Context& ctx, const ImportRequest& request);
/// The result's one serialised form (`lpemu import --json`).
Fields fields(const ImportResult& r);
/// A request from named fields (dir, out, force).
ImportRequest import_request(const Fields& f);

}  // namespace lpemu::app
