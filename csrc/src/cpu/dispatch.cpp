#include "dispatch.h"

#include "paths.h"

namespace jepa::gemm {

#ifdef JEPA_NO_X86_KERNELS
namespace detail {
// No x86 kernels in this build: the selection never names them, so these are never reached.
void run_bf16(const Problem &, int, int, bool) {}
void run_attention_bf16(const Attention &, int, int, bool) {}
void to_bf16_row(const float *, int64_t, uint16_t *) {}
}  // namespace detail
#endif

namespace detail {

const KernelSet & f32_kernels() {
    static const KernelSet & k = []() -> const KernelSet & {
        switch (cpu::selection().f32) {
#ifndef JEPA_NO_X86_KERNELS
            case cpu::F32::Avx512: return avx512::kernels;
            case cpu::F32::Avx2: return avx2::kernels;
#endif
#if defined(__aarch64__) || defined(_M_ARM64)
            case cpu::F32::Neon: return neon::kernels;
#endif
            default: return portable::kernels;
        }
    }();
    return k;
}

bool own_f32() { return cpu::selection().own(); }

namespace {
using Product = void (*)(const Problem &, int, int);
struct Int8Products {
    Product q8, i8;  // the q8_0 product (kernels_q8.inc) and the i8c one (kernels_i8.inc)
};

// The path's int8 products, one ISA for both: AMX-INT8 tiles where the selection has them (with VNNI
// for row tails), VPDPBUSD on AVX-512 VNNI or AVX-VNNI, else AVX2's VPMADDUBSW; SDOT on an ARM64 core
// with DotProd; else portable C++ (each type the same bits on every one).
Int8Products int8_products() {
    const cpu::Selection & s = cpu::selection();
    switch (s.q8) {
#ifndef JEPA_NO_X86_KERNELS
        case cpu::Q8::Avx512Vnni:
            if (s.amx_int8) return {avx512::amx::run_gemm_q8, avx512::amx::run_gemm_i8};
            return {avx512::run_gemm_q8, avx512::run_gemm_i8};
        case cpu::Q8::AvxVnni: return {avx2::vnni::run_gemm_q8, avx2::vnni::run_gemm_i8};
        case cpu::Q8::Avx2: return {avx2::run_gemm_q8, avx2::run_gemm_i8};
#endif
#if defined(__aarch64__) || defined(_M_ARM64)
        case cpu::Q8::NeonDot: return {neon::run_gemm_q8, neon::run_gemm_i8};
#endif
        default: return {portable::run_gemm_q8, portable::run_gemm_i8};
    }
}

const Int8Products & int8() {
    static const Int8Products k = int8_products();  // the selection is fixed for the process
    return k;
}
}  // namespace

void run_q8(const Problem & p, int ith, int nth) { int8().q8(p, ith, nth); }
void run_i8(const Problem & p, int ith, int nth) { int8().i8(p, ith, nth); }

bool bf16_kernel() { return cpu::selection().bf16 == cpu::Bf16::Avx512Bf16; }
bool amx_bf16() { return cpu::selection().amx_bf16; }

Layout layout_of(const ggml_tensor * w) {
    switch (w->type) {
        case GGML_TYPE_F32: return Layout::F32;
        case GGML_TYPE_F16: return Layout::F16;
        case GGML_TYPE_BF16: return bf16_kernel() ? Layout::Bf16Pairs : Layout::Bf16Wide;
        case GGML_TYPE_Q8_0: return Layout::Q8;
        case GGML_TYPE_I8: return Layout::I8;
        default: return Layout::None;
    }
}

}  // namespace detail
}  // namespace jepa::gemm
