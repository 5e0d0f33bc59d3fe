// The q8_0 product (kernels_q8.inc) on AVX-512 with VNNI: the f32 parts on simd_avx512.h's V, the
// block dots on VPDPBUSD. Compiled with those flags and -ffp-contract=off (CMakeLists.txt); called
// only when the CPU has them (gemm.cpp). A file of its own, so the f32 kernels (gemm_avx512.cpp) keep
// running on AVX-512 CPUs without VNNI.
#include "gemm_kernels.h"
#include "simd_avx512.h"
#include "simd_q8_vnni.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

namespace jepa::gemm::detail::avx512 {
#include "kernels_q8.inc"
#include "kernels_i8.inc"
}  // namespace jepa::gemm::detail::avx512
