// `lpemu proposal`, `lpemu proposal verify` and their `lpemu.call` commands ("proposal",
// "proposal verify"): a format proposal package a hardware team verifies against, and the check of
// a vendor's results against it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "lpemu/app/fields.hpp"
#include "lpemu/experiment/context.hpp"
#include "lpemu/experiment/proposal.hpp"

namespace lpemu::app {

/// What to propose.
struct ProposalRequest {
  std::string format;                   ///< element or block format: a name or a .toml file
  std::string out;                      ///< output directory
  bool force = false;                   ///< replace the files of an existing package
  std::uint64_t seed = 1;               ///< seed of the random part of the vectors
  std::string datapath;                 ///< datapath name or .toml: dot-product vectors ("" for none)
  std::string model;                    ///< model name or path: accuracy and cost in summary.md ("" for none)
  std::string text;                     ///< text to score (default: paragraph.txt beside the model)
  std::string target = "h100_sxm";      ///< cost-model hardware target ("" for none)
  std::string core;                     ///< a compute core the plans' GEMMs also run on ("" for none)
  std::string shape = "llama3_8b";      ///< cost-model model shape
  std::string phase = "decode";         ///< decode | prefill
  long long batch = 8, context = 4096;  ///< cost-model batch and context length
  int max_tokens = 0;                   ///< score at most this many tokens (0: all)
  std::function<void(const std::string&)> progress;  ///< one line per finished accuracy plan
};

/// A written package.
struct ProposalResult {
  std::string format;    ///< the proposed (block or element) format's name
  std::string datapath;  ///< the datapath's name, or empty
  std::filesystem::path out;
  std::vector<std::filesystem::path> files;  ///< files written
};

/// Writes the package; everything the accuracy run needs is checked before a file is written.
ProposalResult proposal(experiment::Context& ctx, const ProposalRequest& request);
/// The result's one serialised form (`lpemu proposal --json`; files relative to out).
Fields fields(const ProposalResult& r);
/// A request from named fields (format, out, force, seed, datapath, model, text, target, core, shape,
/// phase, batch, context, max_tokens).
ProposalRequest proposal_request(const Fields& f);

/// A vendor's results to compare with a package.
struct VerifyRequest {
  std::filesystem::path dir;      ///< proposal directory
  std::filesystem::path results;  ///< results CSV (file, row and the fields computed, hex)
};

/// Compares the results with the package's vectors (and checks its MANIFEST).
experiment::VerifyReport verify(experiment::Context& ctx, const VerifyRequest& request);
/// The report's one serialised form (`lpemu proposal verify --json`).
Fields fields(const experiment::VerifyReport& r);
/// A request from named fields (dir, results).
VerifyRequest verify_request(const Fields& f);

}  // namespace lpemu::app
