// `lpemu import DIR OUT.h5`: a Hugging Face checkpoint folder to the engine's HDF5 model file.
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/engine/hf_import.hpp"

namespace lpemu::cli {

namespace {

struct ImportArgs {
  std::string dir, out;
  bool force = false;
};

}  // namespace

void register_import(CLI::App& app, Context& /*ctx*/) {
  static ImportArgs args;
  auto* im = app.add_subcommand("import", "convert a Hugging Face checkpoint folder to an lpemu model .h5");
  im->add_option("DIR", args.dir, "folder with config.json, *.safetensors and tokenizer.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  im->add_option("OUT", args.out, "model file to write (.h5)")->required();
  im->add_flag("--force", args.force, "replace OUT if it exists");
  im->callback([] {
    io::OutputPolicy policy;
    policy.force = args.force;
    for (const auto& e : std::filesystem::directory_iterator(args.dir)) {
      if (e.is_regular_file()) policy.inputs.push_back(e.path());
    }
    const engine::HfCheckpoint ck = engine::import_hf(args.dir, args.out, policy);
    const engine::Config& c = ck.model.config;
    std::cout << "lpemu: " << ck.architecture << " " << c.name << ": " << c.n_layers << " layers, dim "
              << c.dim << ", " << c.n_heads << "/" << c.n_kv_heads << " heads, vocab " << c.vocab_size
              << (ck.model.tokenizer.empty() ? ", no tokenizer" : ", tokenizer.json") << " -> " << args.out
              << "\n";
  });
}

}  // namespace lpemu::cli
