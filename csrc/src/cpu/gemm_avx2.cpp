// The f32 kernels (kernels.inc) on x86-64-v3 (AVX2 + FMA + F16C): the AVX-512 kernels' bits at half
// the vector width. Compiled with those flags and -ffp-contract=off (CMakeLists.txt); called only
// when the CPU has them (gemm.cpp).
#include "gemm_kernels.h"
#include "simd_avx2.h"
#include "simd_q8_avx2.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

namespace jepa::gemm::detail::avx2 {
#include "kernels.inc"
#include "kernels_q8.inc"
#include "kernels_i8.inc"
}  // namespace jepa::gemm::detail::avx2
