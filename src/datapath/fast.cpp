#include "datapath/fast.hpp"

namespace lpemu::datapath::detail {

bool fast_gemm_applicable(const Datapath&, bool) { return false; }

void fast_gemm(const Datapath&, std::size_t, std::size_t, std::size_t, std::span<const Operand>,
               std::span<const Operand>, std::span<const std::uint64_t>, std::span<std::uint64_t>) {}

}  // namespace lpemu::datapath::detail
