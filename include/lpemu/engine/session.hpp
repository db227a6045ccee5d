// Running a model under a precision plan: a Session holds the quantised weights and the KV cache
// and runs prefill (many tokens) and decode (one token) steps; hooks see every quantisation
// point's input and output and every named activation (names as in activations.h5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lpemu/engine/model.hpp"
#include "lpemu/engine/plan.hpp"

namespace lpemu::engine {

/// Called at a quantisation point with the tensor before and after quantisation (as float).
/// Calls are serialised; per-head points may arrive in any order.
using QuantHook = std::function<void(const QuantPoint& p, const RowMatrix& in, const RowMatrix& out)>;
/// Called with a named activation, e.g. "layers/0/attention/qkv_input", "final_residual",
/// "output_input", "logits" (rows = the tokens of this forward call; in a batch, its sequences' rows
/// one after another).
using TraceHook = std::function<void(std::string_view name, const RowMatrix& x)>;

/// What a session is built from besides model and plan.
struct SessionOptions {
  const QuantizerFactory* quantizers = nullptr;  ///< nullptr: element formats of the built-in registry
  const GemmFactory* gemms = nullptr;            ///< nullptr: GemmFactory::builtin()
  QuantHook on_quant;
  TraceHook on_trace;
  int max_tokens = 0;  ///< KV cache length; 0 = the model's seq_len
};

/// The stochastic-rounding stream of a quantisation point (QuantPoint::stream) as sessions set it,
/// so that other front ends (the Python module) draw the same random bits.
std::uint64_t point_stream(std::string_view tensor, int layer, int head, Role role);

/// A model bound to a plan, with a KV cache.
class Session {
 public:
  /// Quantises the weights under the plan and allocates the cache; throws on unknown names.
  /// The model must outlive the session (unquantised float weights are used in place).
  Session(const Model& model, const PrecisionPlan& plan, SessionOptions options = {});
  /// A temporary model would dangle: sessions refer to the model's weights.
  Session(Model&& model, const PrecisionPlan& plan, SessionOptions options = {}) = delete;
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  /// Runs `tokens` at positions position()..position()+n-1; returns logits [n, vocab].
  RowMatrix forward(std::span<const int> tokens);
  /// Runs independent sequences as one batch (their rows together through every linear layer,
  /// attention per sequence), each from position 0. `logits` receives [Σ n_i, vocab], sequence i's
  /// rows after those of the sequences before it (a matrix of that size is reused), each sequence's
  /// bit for bit those of `reset(); forward(sequence i)`. Leaves the session reset.
  void forward_batch(std::span<const std::span<const int>> sequences, RowMatrix& logits);
  /// Number of tokens already in the cache.
  int position() const;
  /// Empties the cache.
  void reset();
  /// The model.
  const Model& model() const;

  /// Implementation detail (one specialisation per compute scalar).
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Index of the largest value (the first on ties; NaNs never win).
std::size_t argmax(std::span<const float> x);
/// Index of the largest entry of a row (the first on ties).
int argmax(const RowMatrix& logits, int row);

/// Greedy generation as llama2.c `run.c -t 0`: feeds the prompt one position at a time, then the
/// argmax, until `steps` positions were run or BOS is produced. Returns prompt + generated ids.
std::vector<int> generate_greedy(Session& session, const std::vector<int>& prompt, int steps);

}  // namespace lpemu::engine
