// The f32 kernels (kernels.inc) on AVX-512 F/BW/DQ/VL: f32 weights, and f16 / bf16 weights widened
// to f32 panel by panel. Compiled with AVX-512 flags and -ffp-contract=off (CMakeLists.txt); called
// only when the CPU has them (gemm.cpp).
#include "gemm_kernels.h"
#include "simd_avx512.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

namespace jepa::gemm::detail::avx512 {
#include "kernels.inc"
}  // namespace jepa::gemm::detail::avx512
