// For Highway kernels that keep arrays of vectors, which need sized vector types: the scalable
// targets (SVE, RVV) are not compiled; there, dispatch picks NEON (or the scalar target).
// Include before <hwy/foreach_target.h>.
#pragma once

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif
