// `lpemu sweep` on an experiment with a [train] table: every plan trains the same model, initialised
// from a shape, on the same tokens through app::train; the fp32 reference also from every seed (the
// noise band); each plan's training step is priced by `lpemu cost --phase train` on the same plan file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "lpemu/app/train.hpp"
#include "lpemu/cost/workload.hpp"
#include "lpemu/engine/model.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/experiment.hpp"

namespace lpemu::app {

/// A Llama-style model of `shape` (RMSNorm, RoPE, SwiGLU) with weights drawn from `seed`: every
/// matrix N(0, 0.02²), the attention and MLP output projections N(0, (0.02/√(2·layers))²) (GPT-2's
/// scaled initialisation, Radford et al. 2019), norms 1; `tokenizer` (may be empty) is stored with it.
engine::Model initial_model(const cost::ModelShape& shape, std::uint64_t seed,
                            const engine::Tokenizer& tokenizer, int seq_len);
/// The initial model of shape `shape` (a data/shapes name or a .toml file) for `seed`, as both
/// `lpemu train --model SHAPE --seed N` and a training experiment make it: initial_model with the
/// stories260K tokenizer when the vocabulary is its 512 tokens, and seq_len max(seq, 256).
engine::Model shape_model(experiment::Context& ctx, const std::string& shape, std::uint64_t seed, int seq);

/// One training run of a training experiment.
struct TrainRun {
  std::string label;           ///< the plan's label
  std::uint64_t seed = 0;      ///< the initialisation seed
  std::filesystem::path plan;  ///< the plan file it trained and was priced with (OUT/plans/LABEL.toml)
  TrainResult result;
  double final_loss = 0;  ///< mean loss of the last min(10, steps) steps
  double gap = 0;         ///< final_loss − the mean final loss of the reference's seeds
  /// `lpemu cost --phase train --json` on `plan`: cluster.train[0]'s step_s, tokens_per_s, mfu and
  /// memory.total (NaN without a [cost] table).
  double step_s, tokens_per_s, mfu, memory_bytes;
};

/// What a training experiment wrote.
struct TrainSweepReport {
  std::filesystem::path dir, results_csv, log_csv, report_md, loss_svg;
  /// The validation-loss curves, the per-block gradient SQNR heat map and its table (empty paths
  /// when the experiment measured no validation loss / no SQNR).
  std::filesystem::path val_svg, sqnr_svg, sqnr_csv;
  std::vector<TrainRun> runs;  ///< reference seeds first, then the other plans from seeds[0]
};

/// Runs the training experiment `exp` (exp.train set) into `out` ("": exp.out_dir).
TrainSweepReport train_sweep(experiment::Context& ctx, const experiment::Experiment& exp,
                             const std::filesystem::path& out);

}  // namespace lpemu::app
