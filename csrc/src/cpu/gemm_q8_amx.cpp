// The q8_0 product (kernels_q8.inc) on AMX-INT8: 16 x 16 tiles of block dots (simd_q8_amx.h), the
// VNNI micro-kernel for the rows that do not fill a tile; the same bits as every other q8_0 path.
// Compiled with AVX-512, VNNI and AMX flags (CMakeLists.txt); called only where CPUID has AMX-INT8
// and the kernel granted the tile state (gemm.cpp).
#define JEPA_Q8_TILES 1
#include "gemm_kernels.h"
#include "simd_avx512.h"
#include "simd_q8_vnni.h"
#include "simd_q8_amx.h"
#include "simd_i8_amx.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

namespace jepa::gemm::detail::avx512::amx {
#include "kernels_q8.inc"
#include "kernels_i8.inc"
}  // namespace jepa::gemm::detail::avx512::amx
