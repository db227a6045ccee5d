// `lpemu train` and `lpemu.call("train", ...)`: trains a model under a precision plan (backward
// pass, gradient formats and optimizer of lpemu::train) and writes the trained model and a log.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "lpemu/app/evaluate.hpp"
#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"

namespace lpemu::app {

/// What to train on and how.
struct TrainRequest {
  /// Model .h5 file or shipped model name, else a shape (data/shapes name or .toml) initialised from `seed`.
  std::string model = "stories260K";
  std::string plan = "fp32";                 ///< plan file, fp32/fp64 or shipped plan name
  std::filesystem::path tokens;              ///< training tokens, a 1-D integer .npy
  std::vector<std::filesystem::path> texts;  ///< or text files, encoded by the model's tokenizer
  int steps = 10;                            ///< optimizer steps
  int batch = 4;                             ///< sequences per step
  int seq = 32;                              ///< positions per sequence (each window holds seq + 1 tokens)
  std::string optimizer = "adamw";           ///< "sgd" (with momentum) or "adamw"
  double lr = 1e-3;                          ///< peak learning rate
  double momentum = 0.9;                     ///< SGD momentum
  double weight_decay = 0.0;                 ///< AdamW decoupled weight decay
  double clip_norm = 0.0;                    ///< global gradient-norm clipping (0: none)
  int warmup = 0;                            ///< warm-up steps
  std::string schedule = "cosine";  ///< after warm-up: "cosine" (to 0 at the last step) or "constant"
  std::uint64_t seed = 0;     ///< initialises a shape `model`; mixed into every stochastic-rounding stream
  std::filesystem::path out;  ///< output folder (model.h5, log.csv, log.h5)
  double val_fraction = 0;    ///< share of the windows held out for validation (the last ones); 0: none
  int eval_every = 10;        ///< validation loss at steps 0, eval_every, 2·eval_every, ...
  int sqnr_every = 0;         ///< per-layer gradient SQNR against the unquantised gradient (0: never)
  bool resume = false;        ///< continue the run in `out` (its state.h5 and log) up to `steps` in total
  ProgressFn progress;        ///< called after every step (not a field)
};

/// One optimizer step of the log.
struct TrainStep {
  int step = 0;
  double loss = 0;       ///< mean cross-entropy of the step's batch before the update
  double grad_norm = 0;  ///< global gradient norm before clipping
  double lr = 0;         ///< learning rate of the step
  double val_loss =
      std::numeric_limits<double>::quiet_NaN();  ///< mean cross-entropy of the validation windows before the
                                                 ///< update (NaN: not measured)
  std::vector<double>
      grad_sqnr;  ///< per block: SQNR (dB) of the gradient against the unquantised one (empty: not measured)
  double loss_scale = 1;  ///< the loss scale of the step (1 without loss scaling)
  bool skipped = false;   ///< dynamic loss scaling skipped the update (Inf/NaN gradients)
  /// Per role of TrainResult::count_roles: elements of that role's tensors quantised above their
  /// representable range in this step's training pass (saturated or ±Inf/NaN), and non-zero elements
  /// quantised to zero.
  std::vector<std::uint64_t> overflow, underflow;
};

/// What a training run did.
struct TrainResult {
  std::string model, plan, optimizer;
  int batch = 0, seq = 0, windows = 0;   ///< windows: the token stream's windows of seq + 1 tokens
  int val_windows = 0;                   ///< the last val_windows windows are held out for validation
  int layers = 0;                        ///< transformer blocks (columns of grad_sqnr)
  int first_step = 0;                    ///< the step this invocation started at (> 0 when resumed)
  std::vector<std::string> count_roles;  ///< the roles the plan quantises in training (overflow columns)
  std::vector<TrainStep> log;
  std::string model_out, log_out, log_h5;  ///< the files written
  double seconds = 0;                      ///< training time (not a field: it differs run to run)
};

/// Trains as `request` says; throws lpemu::Error for bad input.
TrainResult train(experiment::Context& ctx, const TrainRequest& request);
/// The result's one serialised form (`lpemu train --json`).
Fields fields(const TrainResult& r);
/// A request from named fields (model, plan, tokens, texts, steps, batch, seq, optimizer, lr,
/// momentum, weight_decay, clip_norm, warmup, schedule, seed, out, val_fraction, eval_every,
/// sqnr_every, resume).
TrainRequest train_request(const Fields& f);

}  // namespace lpemu::app
