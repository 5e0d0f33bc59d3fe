// The kernels of this process's selection (paths.h) as the op glue and the packing call them: the f32
// kernel set, the q8_0 product, and the packed layout each weight type takes.
#pragma once

#include "gemm_kernels.h"

namespace jepa::gemm::detail {

// The f32 kernels of the path (the portable ones on the ggml path: text's per-sequence attention
// and the elementwise GELU have no ggml op to fall back to).
const KernelSet & f32_kernels();
// Whether the engine's own kernels run the products (every path but ggml's).
bool own_f32();
// The q8_0 and i8c products of the path.
void run_q8(const Problem & p, int ith, int nth);
void run_i8(const Problem & p, int ith, int nth);
// Whether bf16 weights run the bf16 kernel (VDPBF16PS, and AMX tiles where amx_bf16()).
bool bf16_kernel();
bool amx_bf16();
// The packed layout a weight of this type takes on this path (None: ggml's product runs it).
Layout layout_of(const ggml_tensor * w);

}  // namespace jepa::gemm::detail
