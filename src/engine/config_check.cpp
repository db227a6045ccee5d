// Hyper-parameter checks shared by every model loader (HDF5 models, Hugging Face import): a model
// whose configuration no forward pass can use is refused by name instead of evaluating to NaN.
#include <cmath>
#include <string>

#include "lpemu/engine/model.hpp"
#include "lpemu/error.hpp"
#include "lpemu/io/text.hpp"

namespace lpemu::engine {
namespace {

[[noreturn]] void refuse(const std::string& where, const std::string& field, const std::string& value,
                         const std::string& expected) {
  throw SpecError(where + ": " + field + " = " + value + ": expected " + expected);
}

std::string real(double v) { return io::format_number(v, io::NumberStyle::shortest); }

void positive(const std::string& where, const char* field, int v) {
  if (v < 1) refuse(where, field, std::to_string(v), "a positive integer");
}

void token_id(const std::string& where, const char* field, int id, int vocab) {
  if (id < 0 || id >= vocab) {
    refuse(where, field, std::to_string(id),
           "a token id in 0.." + std::to_string(vocab - 1) + " (vocab_size " + std::to_string(vocab) + ")");
  }
}

}  // namespace

void check_config(const Config& c, const std::string& where) {
  positive(where, "dim", c.dim);
  positive(where, "n_layers", c.n_layers);
  positive(where, "n_heads", c.n_heads);
  positive(where, "n_kv_heads", c.n_kv_heads);
  positive(where, "head_dim", c.head_dim);
  positive(where, "hidden_dim", c.hidden_dim);
  positive(where, "vocab_size", c.vocab_size);
  positive(where, "seq_len", c.seq_len);
  if (c.n_heads % c.n_kv_heads != 0) {
    refuse(where, "n_kv_heads", std::to_string(c.n_kv_heads),
           "a divisor of n_heads = " + std::to_string(c.n_heads) + " (grouped-query attention)");
  }
  if (!(std::isfinite(c.norm_eps) && c.norm_eps >= 0))
    refuse(where, "norm_eps", real(c.norm_eps), "a finite number >= 0");
  if (c.positions == PositionKind::rope) {
    if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0))
      refuse(where, "rope_theta", real(c.rope_theta), "a finite number > 0");
    if (c.head_dim % 2 != 0)
      refuse(where, "head_dim", std::to_string(c.head_dim),
             "an even number (RoPE rotates pairs of features)");
  }
  if (c.rope_scaling == "llama3") {
    // transformers modeling_rope_utils.py `_validate_llama3_parameters`: factor >= 1,
    // low_freq_factor < high_freq_factor; the wavelengths divide by both factors.
    if (!(std::isfinite(c.rope_factor) && c.rope_factor >= 1))
      refuse(where, "rope_factor", real(c.rope_factor), "a finite number >= 1");
    if (!(std::isfinite(c.rope_low_freq_factor) && c.rope_low_freq_factor > 0))
      refuse(where, "rope_low_freq_factor", real(c.rope_low_freq_factor), "a finite number > 0");
    if (!(std::isfinite(c.rope_high_freq_factor) && c.rope_high_freq_factor > c.rope_low_freq_factor)) {
      refuse(where, "rope_high_freq_factor", real(c.rope_high_freq_factor),
             "a finite number > rope_low_freq_factor = " + real(c.rope_low_freq_factor));
    }
    positive(where, "rope_original_max_positions", c.rope_original_max_positions);
  }
  if (c.sliding_window < 0)
    refuse(where, "sliding_window", std::to_string(c.sliding_window), "0 (none) or a positive span");
  if (c.n_experts < 0)
    refuse(where, "n_experts", std::to_string(c.n_experts), "0 (dense) or a positive count");
  if (c.n_experts > 0 && (c.n_experts_per_token < 1 || c.n_experts_per_token > c.n_experts)) {
    refuse(where, "n_experts_per_token", std::to_string(c.n_experts_per_token),
           "an integer in 1..n_experts = " + std::to_string(c.n_experts));
  }
  token_id(where, "bos_id", c.bos_id, c.vocab_size);
  token_id(where, "eos_id", c.eos_id, c.vocab_size);
}

}  // namespace lpemu::engine
