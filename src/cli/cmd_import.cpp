// `lpemu import DIR OUT.h5`: a Hugging Face checkpoint folder to the engine's HDF5 model file.
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/engine/hf_import.hpp"

namespace lpemu::cli {

void register_import(CLI::App& app, Context& /*ctx*/) {
  auto* im = app.add_subcommand("import", "convert a Hugging Face checkpoint folder to an lpemu model .h5");
  static std::string dir;
  static std::string out;
  im->add_option("DIR", dir, "folder with config.json, *.safetensors and tokenizer.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  im->add_option("OUT", out, "model file to write (.h5)")->required();
  im->callback([] {
    const engine::HfCheckpoint ck = engine::import_hf(dir);
    engine::save_hf_checkpoint(ck, out);
    const engine::Config& c = ck.model.config;
    std::cout << "lpemu: " << ck.architecture << " " << c.name << ": " << c.n_layers << " layers, dim "
              << c.dim << ", " << c.n_heads << "/" << c.n_kv_heads << " heads, vocab " << c.vocab_size
              << (ck.model.tokenizer.empty() ? ", no tokenizer" : ", tokenizer.json") << " -> " << out
              << "\n";
  });
}

}  // namespace lpemu::cli
