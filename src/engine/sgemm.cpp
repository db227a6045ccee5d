// The float GEMM kernel of the engine in Google Highway: a panel of B (two vectors of columns) is
// packed k-major in chunks, then each group of up to kRows rows of A runs over the chunk with its
// outputs in vector lanes (lanes = columns), one broadcast of A per row and k. Every lane adds its
// products in ascending k, a multiply then an add (the library is built with -ffp-contract=off),
// so the order of every sum is the naive loop's on every target; partial sums between chunks
// are stored as the float they are. Compiled once per SIMD target and chosen at run time.
#include <algorithm>
#include <cstring>
#include <vector>

// Before Highway's first header: arrays of vectors need sized targets only.
#include "common/hwy_sized_targets.hpp"  // IWYU pragma: keep

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/sgemm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/aligned_allocator.h>
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "engine/sgemm.hpp"

HWY_BEFORE_NAMESPACE();
namespace lpemu::engine::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

constexpr int kRows = 4;             // rows of A per pass over a packed chunk
constexpr std::size_t kChunk = 128;  // k per packed chunk (32 columns: 16 KiB, within L1)

std::size_t PanelWidth() { return 2 * hn::Lanes(DF()); }

// Packs B[cols, k0 .. k0 + kn) into buf [kn][w] (w = PanelWidth()), zero beyond `cols`.
void Pack(const float* b, std::size_t ldb, std::size_t cols, std::size_t k0, std::size_t kn,
          float* HWY_RESTRICT buf) {
  const DF df;
  const std::size_t lanes = hn::Lanes(df);
  const std::size_t w = 2 * lanes;
  std::size_t j = 0;
  if (w % 4 == 0) {
    // Four rows at a time: StoreInterleaved4 writes (r0[t], r1[t], r2[t], r3[t]) for each t, the
    // four columns of one k, copied into place.
    HWY_ALIGN float tmp[4 * hn::MaxLanes(DF())];
    for (; j + 4 <= cols; j += 4) {
      const float* r0 = b + j * ldb + k0;
      const float* r1 = r0 + ldb;
      const float* r2 = r1 + ldb;
      const float* r3 = r2 + ldb;
      std::size_t t = 0;
      for (; t + lanes <= kn; t += lanes) {
        // The same rows two slices ahead: a weight that lives in DRAM is read as four streams
        // whose next lines are already on their way (a decode step's GEMV: 11.2 -> 7.7 ms for a
        // 11008 x 4096 weight, one thread).
        hwy::Prefetch(r0 + t + 2 * kChunk);
        hwy::Prefetch(r1 + t + 2 * kChunk);
        hwy::Prefetch(r2 + t + 2 * kChunk);
        hwy::Prefetch(r3 + t + 2 * kChunk);
        hn::StoreInterleaved4(hn::LoadU(df, r0 + t), hn::LoadU(df, r1 + t), hn::LoadU(df, r2 + t),
                              hn::LoadU(df, r3 + t), df, tmp);
        for (std::size_t u = 0; u < lanes; ++u)
          std::memcpy(buf + (t + u) * w + j, tmp + 4 * u, 4 * sizeof(float));
      }
      for (; t < kn; ++t) {
        float* dst = buf + t * w + j;
        dst[0] = r0[t];
        dst[1] = r1[t];
        dst[2] = r2[t];
        dst[3] = r3[t];
      }
    }
  }
  for (; j < w; ++j) {
    const float* r = b + j * ldb + k0;
    for (std::size_t t = 0; t < kn; ++t) buf[t * w + j] = j < cols ? r[t] : 0.0F;
  }
}

// Rows [0, R) of the panel over one packed chunk of kn values of k: acc = (first ? +0 : C) plus
// the chunk's products in ascending k; stores `cols` columns of C.
template <int R>
HWY_INLINE void Rows(const float* a, std::size_t lda, const float* HWY_RESTRICT buf, std::size_t kn,
                     bool first, float* c, std::size_t ldc, std::size_t cols) {
  const DF df;
  const std::size_t lanes = hn::Lanes(df);
  const std::size_t w = 2 * lanes;
  HWY_ALIGN float tmp[2 * hn::MaxLanes(DF())];
  VF lo[R];
  VF hi[R];
  for (int r = 0; r < R; ++r) {
    if (first) {
      lo[r] = hn::Zero(df);
      hi[r] = hn::Zero(df);
    } else if (cols == w) {
      lo[r] = hn::LoadU(df, c + r * ldc);
      hi[r] = hn::LoadU(df, c + r * ldc + lanes);
    } else {
      std::fill(tmp, tmp + w, 0.0F);
      std::copy(c + r * ldc, c + r * ldc + cols, tmp);
      lo[r] = hn::Load(df, tmp);
      hi[r] = hn::Load(df, tmp + lanes);
    }
  }
  for (std::size_t t = 0; t < kn; ++t) {
    const VF b0 = hn::Load(df, buf + t * w);
    const VF b1 = hn::Load(df, buf + t * w + lanes);
    for (int r = 0; r < R; ++r) {
      const VF x = hn::Set(df, a[static_cast<std::size_t>(r) * lda + t]);
      lo[r] = hn::Add(lo[r], hn::Mul(x, b0));
      hi[r] = hn::Add(hi[r], hn::Mul(x, b1));
    }
  }
  for (int r = 0; r < R; ++r) {
    if (cols == w) {
      hn::StoreU(lo[r], df, c + r * ldc);
      hn::StoreU(hi[r], df, c + r * ldc + lanes);
    } else {
      hn::Store(lo[r], df, tmp);
      hn::Store(hi[r], df, tmp + lanes);
      std::copy(tmp, tmp + cols, c + r * ldc);
    }
  }
}

void Panel(std::size_t rows, std::size_t cols, std::size_t k, const float* a, std::size_t lda, const float* b,
           std::size_t ldb, float* c, std::size_t ldc) {
  const std::size_t w = PanelWidth();
  thread_local hwy::AlignedFreeUniquePtr<float[]> buf;
  thread_local std::size_t held = 0;
  const std::size_t need = std::min(k, kChunk) * w;
  if (held < need) {
    buf = hwy::AllocateAligned<float>(need);
    held = need;
  }
  if (k == 0) {  // an empty sum: +0
    for (std::size_t i = 0; i < rows; ++i) std::fill(c + i * ldc, c + i * ldc + cols, 0.0F);
    return;
  }
  for (std::size_t k0 = 0; k0 < k; k0 += kChunk) {
    const std::size_t kn = std::min(kChunk, k - k0);
    Pack(b, ldb, cols, k0, kn, buf.get());
    std::size_t i = 0;
    for (; i + kRows <= rows; i += kRows)
      Rows<kRows>(a + i * lda + k0, lda, buf.get(), kn, k0 == 0, c + i * ldc, ldc, cols);
    const float* ai = a + i * lda + k0;
    float* ci = c + i * ldc;
    switch (rows - i) {
      case 3: Rows<3>(ai, lda, buf.get(), kn, k0 == 0, ci, ldc, cols); break;
      case 2: Rows<2>(ai, lda, buf.get(), kn, k0 == 0, ci, ldc, cols); break;
      case 1: Rows<1>(ai, lda, buf.get(), kn, k0 == 0, ci, ldc, cols); break;
      default: break;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lpemu::engine::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpemu::engine::detail {

HWY_EXPORT(PanelWidth);
HWY_EXPORT(Panel);

std::size_t sgemm_panel_width() { return HWY_DYNAMIC_DISPATCH(PanelWidth)(); }

void sgemm_panel(std::size_t rows, std::size_t cols, std::size_t k, const float* a, std::size_t lda,
                 const float* b, std::size_t ldb, float* c, std::size_t ldc) {
  HWY_DYNAMIC_DISPATCH(Panel)(rows, cols, k, a, lda, b, ldb, c, ldc);
}

}  // namespace lpemu::engine::detail
#endif  // HWY_ONCE
