// The q8_0 product (kernels_q8.inc) on ARM64 with DotProd: the f32 parts on simd_neon.h's V, the block
// dots on SDOT. Compiled with +dotprod and -ffp-contract=off (CMakeLists.txt); called only when HWCAP
// says the CPU has it (gemm.cpp), so the f32 kernels (gemm_neon.cpp) keep running on ARMv8.0 cores.
#if defined(__aarch64__)  // (empty elsewhere: the source glob takes every file)
#include "gemm_kernels.h"
#include "simd_neon.h"
#include "simd_q8_neon.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

namespace jepa::gemm::detail::neon {
#include "kernels_q8.inc"
#include "kernels_i8.inc"
}  // namespace jepa::gemm::detail::neon
#endif
