// The f32 kernels (kernels.inc) in plain C++ (simd_portable.h), for CPUs without an ISA path of
// their own: the x86 paths' bits wherever std::fma is exact (it always is). Compiled with
// -ffp-contract=off (CMakeLists.txt), so only the kernels' own fused products are fused.
#include "gemm_kernels.h"
#include "simd_portable.h"
#include "simd_q8_portable.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

namespace jepa::gemm::detail::portable {
#include "kernels.inc"
#include "kernels_q8.inc"
#include "kernels_i8.inc"
}  // namespace jepa::gemm::detail::portable
