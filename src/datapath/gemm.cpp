// GEMM under a datapath: operands are decoded once per matrix, then every output element is one
// block-engine dot product over row i of A and column j of B. Elements are independent, so the
// tiling over oneTBB threads cannot change any bit.
#include "lpemu/datapath/gemm.hpp"

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

#include "datapath/engine.hpp"
#include "datapath/fast.hpp"
#include "lpemu/error.hpp"

namespace lpemu::datapath {
namespace {

void check_size(const char* what, std::size_t got, std::size_t want) {
  if (got != want) {
    throw ShapeError("gemm: " + std::string(what) + " has " + std::to_string(got) + " elements, expected " +
                     std::to_string(want));
  }
}

// Block scales per row of A (and per column of B) along K.
std::size_t scale_blocks(const Datapath& dp, std::size_t k) {
  const std::size_t sb = dp.scale_block > 0 ? static_cast<std::size_t>(dp.scale_block) : 0;
  return sb > 0 ? (k + sb - 1) / sb : 0;
}

// The operands' sizes (B's: b_size) and C's codes, as every gemm() checks them.
template <typename In, typename Acc>
void check_operands(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k, std::span<const In> a,
                    std::size_t b_size, std::span<const Acc> c, std::span<Acc> d, const GemmScales& scales) {
  check_size("A", a.size(), m * k);
  check_size("B", b_size, k * n);
  if (!c.empty()) check_size("C", c.size(), m * n);
  check_size("D", d.size(), m * n);
  const std::size_t ns = scale_blocks(dp, k);
  if (!scales.a.empty()) check_size("A's scales", scales.a.size(), m * ns);
  if (!scales.b.empty()) check_size("B's scales", scales.b.size(), ns * n);
  if (!scales.a_significand.empty())
    check_size("A's scale significands", scales.a_significand.size(), m * ns);
  if (!scales.b_significand.empty())
    check_size("B's scale significands", scales.b_significand.size(), ns * n);
  for (std::size_t i = 0; i < c.size(); ++i) detail::require_operand_fits(dp.output(), c[i], "C", i);
}

// True when neither operand has block scales.
bool no_scales(const GemmScales& s) {
  return s.a.empty() && s.b.empty() && s.a_significand.empty() && s.b_significand.empty();
}

// 32-bit C/D storage must hold the datapath's output codes.
void check_storage32(const Datapath& dp) {
  if (dp.output().bits > 32) {
    throw ShapeError("gemm: 32-bit C/D storage cannot hold codes of '" + dp.output().name + "'");
  }
}

template <typename In, typename Acc>
void gemm_impl(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k, std::span<const In> a,
               std::span<const In> b, std::span<const Acc> c, std::span<Acc> d, const GemmScales& scales) {
  check_operands(dp, m, n, k, a, b.size(), c, d, scales);
  const std::size_t ns = scale_blocks(dp, k);
  if (detail::fast_gemm_applicable(dp, no_scales(scales))) {
    // Packs straight from the codes (decode with m = 1 must not pay for a matrix of Operands) and
    // writes D in the caller's storage.
    detail::fast_gemm(dp, m, n, k, a, b, c, d);
    return;
  }

  // Decode A by rows and B by columns (B transposed), once; codes of <= 8 bits via a table.
  auto table = [&](const format::Format& f) {
    std::vector<detail::Operand> t;
    if (f.bits <= 8) {
      for (std::uint64_t code = 0; code < (std::uint64_t{1} << f.bits); ++code) {
        t.push_back(detail::decode_operand(f, code, dp.flush_subnormal_inputs));
      }
    }
    return t;
  };
  const std::vector<detail::Operand> ta = table(dp.a);
  const std::vector<detail::Operand> tb = table(dp.b);
  std::vector<detail::Operand> da(m * k);
  std::vector<detail::Operand> db(n * k);
  tbb::parallel_for(std::size_t{0}, m, [&](std::size_t i) {
    for (std::size_t p = 0; p < k; ++p) {
      const auto code = static_cast<std::uint64_t>(a[i * k + p]);
      detail::require_operand_fits(dp.a, code, "A", i * k + p);
      da[i * k + p] = ta.empty() ? detail::decode_operand(dp.a, code, dp.flush_subnormal_inputs) : ta[code];
    }
  });
  tbb::parallel_for(std::size_t{0}, k, [&](std::size_t p) {
    for (std::size_t j = 0; j < n; ++j) {
      const auto code = static_cast<std::uint64_t>(b[p * n + j]);
      detail::require_operand_fits(dp.b, code, "B", p * n + j);
      db[j * k + p] = tb.empty() ? detail::decode_operand(dp.b, code, dp.flush_subnormal_inputs) : tb[code];
    }
  });
  // B's scales by column ([N × ns]), as each dot product reads them.
  const auto by_column = [&](auto src) {
    std::vector<std::remove_cv_t<typename decltype(src)::element_type>> t(src.empty() ? 0 : ns * n);
    for (std::size_t s = 0; s < ns && !src.empty(); ++s) {
      for (std::size_t j = 0; j < n; ++j) t[j * ns + s] = src[s * n + j];
    }
    return t;
  };
  const std::vector<std::int32_t> sbt = by_column(scales.b);
  const std::vector<std::uint32_t> mbt = by_column(scales.b_significand);
  const auto row_of = [&](auto src, std::size_t i) { return src.empty() ? src : src.subspan(i * ns, ns); };

  tbb::parallel_for(tbb::blocked_range2d<std::size_t>(0, m, 16, 0, n, 16), [&](const auto& r) {
    for (std::size_t i = r.rows().begin(); i != r.rows().end(); ++i) {
      const std::span<const detail::Operand> row(da.data() + i * k, k);
      BlockScales s{row_of(scales.a, i), {}, row_of(scales.a_significand, i), {}};
      for (std::size_t j = r.cols().begin(); j != r.cols().end(); ++j) {
        const std::span<const detail::Operand> col(db.data() + j * k, k);
        if (!sbt.empty()) s.b = std::span<const std::int32_t>(sbt.data() + j * ns, ns);
        if (!mbt.empty()) s.b_significand = std::span<const std::uint32_t>(mbt.data() + j * ns, ns);
        const std::uint64_t cc = c.empty() ? 0 : static_cast<std::uint64_t>(c[i * n + j]);
        d[i * n + j] = static_cast<Acc>(detail::dot_decoded(dp, row, col, cc, s, i * n + j));
      }
    }
  });
}

}  // namespace

void gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k, std::span<const std::uint64_t> a,
          std::span<const std::uint64_t> b, std::span<const std::uint64_t> c, std::span<std::uint64_t> d,
          const GemmScales& scales) {
  gemm_impl<std::uint64_t, std::uint64_t>(dp, m, n, k, a, b, c, d, scales);
}

void gemm(const Datapath& dp, std::size_t m, std::size_t n, std::size_t k, std::span<const std::uint8_t> a,
          std::span<const std::uint8_t> b, std::span<const std::uint32_t> c, std::span<std::uint32_t> d,
          const GemmScales& scales) {
  check_storage32(dp);
  gemm_impl<std::uint8_t, std::uint32_t>(dp, m, n, k, a, b, c, d, scales);
}

PreparedB::PreparedB(const Datapath& dp, std::size_t n, std::size_t k, std::vector<std::uint8_t> b, bool pack)
    : dp_(dp), n_(n), k_(k), kept_(std::move(b)), codes_(kept_) {
  check_size("B", codes_.size(), k * n);
  if (pack && k > 0 && detail::fast_gemm_applicable(dp, true)) {
    fast_ = detail::fast_prepare_b(dp, n, k, codes_);  // checks every code where it packs
  }
  if (fast_ == nullptr) {
    for (std::size_t i = 0; i < codes_.size(); ++i) detail::require_operand_fits(dp.b, codes_[i], "B", i);
  }
}

PreparedB::PreparedB(const Datapath& dp, std::size_t n, std::size_t k, const Columns& columns, bool pack)
    : dp_(dp), n_(n), k_(k), written_(std::make_unique_for_overwrite<std::uint8_t[]>(k * n)) {
  codes_ = std::span<const std::uint8_t>(written_.get(), k * n);
  // Written and checked where packed (every code), else written only.
  fast_ = detail::fast_prepare_b(dp, n, k, columns, written_.get(),
                                 pack && k > 0 && detail::fast_gemm_applicable(dp, true));
  if (fast_ == nullptr) {
    for (std::size_t i = 0; i < codes_.size(); ++i) detail::require_operand_fits(dp.b, codes_[i], "B", i);
  }
}

std::size_t PreparedB::bytes() const { return codes_.size() + (fast_ ? detail::fast_b_bytes(*fast_) : 0); }

std::size_t PreparedB::packed_bytes(const Datapath& dp, std::size_t n, std::size_t k) {
  return k > 0 && detail::fast_gemm_applicable(dp, true) ? detail::fast_b_bytes(dp, n, k) : 0;
}

void gemm(std::size_t m, std::span<const std::uint8_t> a, const PreparedB& b,
          std::span<const std::uint32_t> c, std::span<std::uint32_t> d, const GemmScales& scales) {
  if (b.fast_ == nullptr || !no_scales(scales)) {
    gemm(b.dp_, m, b.n_, b.k_, a, b.codes_, c, d, scales);
    return;
  }
  check_storage32(b.dp_);
  check_operands(b.dp_, m, b.n_, b.k_, a, b.codes_.size(), c, d, scales);
  detail::fast_gemm(b.dp_, m, b.n_, b.k_, a, b.codes_, *b.fast_, c, d);
}

}  // namespace lpemu::datapath
