// The f32 kernels (kernels.inc) on ARM64 Advanced SIMD (simd_neon.h): f32 weights, and f16 / bf16
// weights widened to f32 panel by panel (no bf16 dot-product kernel on ARM). Compiled with
// -ffp-contract=off (CMakeLists.txt); called when the CPU has ASIMD (gemm.cpp). Empty elsewhere.
#if defined(__aarch64__) || defined(_M_ARM64)
#include "gemm_kernels.h"
#include "simd_neon.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

namespace jepa::gemm::detail::neon {
#include "kernels.inc"
}  // namespace jepa::gemm::detail::neon
#endif
