// The q8_0 product (kernels_q8.inc) on AVX2 with AVX-VNNI: the f32 parts on simd_avx2.h's V, the block
// dots on ymm VPDPBUSD. Compiled with those flags and -ffp-contract=off (CMakeLists.txt); called only
// when the CPU has them (gemm.cpp); the same bits as every other q8_0 path.
#include "gemm_kernels.h"
#include "simd_avx2.h"
#include "simd_q8_avxvnni.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

namespace jepa::gemm::detail::avx2::vnni {
#include "kernels_q8.inc"
#include "kernels_i8.inc"
}  // namespace jepa::gemm::detail::avx2::vnni
