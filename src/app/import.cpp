#include "lpemu/app/import.hpp"

#include <filesystem>

#include "lpemu/engine/hf_import.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/output.hpp"

namespace lpemu::app {

ImportResult import_checkpoint(experiment::Context& /*ctx*/, const ImportRequest& a) {
  if (!std::filesystem::is_directory(a.dir))
    throw IoError(a.dir + ": not a directory (expected a checkpoint folder)");
  io::OutputPolicy policy;
  policy.force = a.force;
  for (const auto& e : std::filesystem::directory_iterator(a.dir)) {
    if (e.is_regular_file()) policy.inputs.push_back(e.path());
  }
  const engine::HfCheckpoint ck = engine::import_hf(a.dir, a.out, policy);
  const engine::Config& c = ck.model.config;
  ImportResult r;
  r.architecture = ck.architecture;
  r.name = c.name;
  r.out = a.out;
  r.n_layers = c.n_layers;
  r.dim = c.dim;
  r.n_heads = c.n_heads;
  r.n_kv_heads = c.n_kv_heads;
  r.vocab_size = c.vocab_size;
  r.tokenizer = !ck.model.tokenizer.empty();
  return r;
}

Fields fields(const ImportResult& r) {
  return {{"architecture", r.architecture},
          {"name", r.name},
          {"n_layers", r.n_layers},
          {"dim", r.dim},
          {"n_heads", r.n_heads},
          {"n_kv_heads", r.n_kv_heads},
          {"vocab_size", r.vocab_size},
          {"tokenizer", r.tokenizer},
          {"out", r.out}};
}

ImportRequest import_request(const Fields& f) {
  ImportRequest r;
  FieldReader in(f, "import");
  in.read("dir", r.dir);
  in.read("out", r.out);
  in.read("force", r.force);
  in.finish();
  if (r.dir.empty() || r.out.empty())
    throw SpecError("import: dir (a checkpoint folder) and out (a .h5 file) are required");
  return r;
}

}  // namespace lpemu::app
