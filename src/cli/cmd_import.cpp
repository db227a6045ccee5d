// `lpemu import DIR OUT.h5`: parses into app::ImportRequest, runs app::import_checkpoint, prints.
#include <iostream>

#include "cli/commands.hpp"
#include "lpemu/app/import.hpp"

namespace lpemu::cli {

void register_import(CLI::App& app, Context& ctx) {
  static app::ImportRequest req;
  static bool json = false;
  auto* im = app.add_subcommand("import", "convert a Hugging Face checkpoint folder to an lpemu model .h5");
  im->add_option("DIR", req.dir, "folder with config.json, *.safetensors and tokenizer.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  im->add_option("OUT", req.out, "model file to write (.h5)")->required();
  im->add_flag("--force", req.force, "replace OUT if it exists");
  im->add_flag("--json", json, "print JSON instead of a line");
  im->callback([&ctx] {
    const app::ImportResult r = app::import_checkpoint(ctx, req);
    if (json) {
      print_json(app::fields(r));
      return;
    }
    std::cout << "lpemu: " << r.architecture << " " << r.name << ": " << r.n_layers << " layers, dim "
              << r.dim << ", " << r.n_heads << "/" << r.n_kv_heads << " heads, vocab " << r.vocab_size
              << (r.tokenizer ? ", tokenizer.json" : ", no tokenizer") << " -> " << r.out << "\n";
  });
}

}  // namespace lpemu::cli
