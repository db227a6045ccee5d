// The bit-exact datapath GEMM strategy (private to the engine).
#pragma once

#include <memory>

#include "lpemu/datapath/datapath.hpp"
#include "lpemu/engine/quantizer.hpp"

namespace lpemu::engine::detail {

/// The GEMM strategy that runs `dp` on operands as their quantisation points encoded them.
std::shared_ptr<const Gemm> make_datapath_gemm(const datapath::Datapath& dp);

}  // namespace lpemu::engine::detail
