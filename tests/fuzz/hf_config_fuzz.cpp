// libFuzzer target: Hugging Face import driven by config.json (the bytes), beside a fixed tiny
// Llama checkpoint (model.safetensors, tokenizer.json) written once per process: every config the
// importer accepts must describe a model it can write, and every other one must be an lpemu::Error.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "lpemu/engine/hf_import.hpp"
#include "lpemu/io/hdf5.hpp"
#include "lpemu/io/output.hpp"

namespace {

namespace fs = std::filesystem;

// The tensors of a Llama with hidden_size 8, 1 layer, 2 heads of 4, 1 KV head, intermediate 16,
// vocab 16, tied embeddings (the seed config.json in tests/fuzz/corpus/hf_config/).
void write_checkpoint(const fs::path& dir) {
  struct T {
    std::string name;
    std::vector<std::size_t> shape;
  };
  const std::vector<T> ts{{"model.embed_tokens.weight", {16, 8}},
                          {"model.layers.0.input_layernorm.weight", {8}},
                          {"model.layers.0.self_attn.q_proj.weight", {8, 8}},
                          {"model.layers.0.self_attn.k_proj.weight", {4, 8}},
                          {"model.layers.0.self_attn.v_proj.weight", {4, 8}},
                          {"model.layers.0.self_attn.o_proj.weight", {8, 8}},
                          {"model.layers.0.post_attention_layernorm.weight", {8}},
                          {"model.layers.0.mlp.gate_proj.weight", {16, 8}},
                          {"model.layers.0.mlp.up_proj.weight", {16, 8}},
                          {"model.layers.0.mlp.down_proj.weight", {8, 16}},
                          {"model.norm.weight", {8}}};
  std::string header = "{";
  std::vector<float> data;
  for (const T& t : ts) {
    std::size_t n = 1;
    for (const auto d : t.shape) n *= d;
    const std::size_t begin = data.size() * sizeof(float);
    for (std::size_t i = 0; i < n; ++i)
      data.push_back(0.01F * static_cast<float>((i * 7 + t.name.size()) % 23) - 0.1F);
    std::string shape;
    for (const auto d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name +
              "\":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(begin) +
              "," + std::to_string(data.size() * sizeof(float)) + "]}";
  }
  header += "}";
  std::ofstream out(dir / "model.safetensors", std::ios::binary | std::ios::trunc);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size() * sizeof(float)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The checkpoint lives in /dev/shm where it exists: the accepted configs' models go through the
  // atomic writer (fsync, rename), which then never waits for a disk.
  // libhdf5, which builds the model file, frees its memory at once (see model_h5_fuzz.cpp).
  static const fs::path dir = [] {
    lpemu::io::h5_disable_free_lists();
    const fs::path d = lpemu::test::scratch_path("hf_config");
    fs::create_directories(d);
    write_checkpoint(d);
    return d;
  }();
  std::ofstream(dir / "config.json", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  lpemu::test::expect_clean([&] {
    (void)lpemu::engine::import_hf(dir, dir / "out.h5", lpemu::io::OutputPolicy{true, {}});
  });
  return 0;
}
