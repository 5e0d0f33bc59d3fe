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

// AMX-INT8 tiles where the selection has them (with VNNI for row tails), VPDPBUSD on AVX-512 VNNI or
// AVX-VNNI, else AVX2's VPMADDUBSW; SDOT on an ARM64 core with DotProd; else portable C++ (the same
// bits on each, kernels_q8.inc).
void run_q8(const Problem & p, int ith, int nth) {
    const cpu::Selection & s = cpu::selection();
    switch (s.q8) {
#ifndef JEPA_NO_X86_KERNELS
        case cpu::Q8::Avx512Vnni:
            return s.amx_int8 ? avx512::amx::run_gemm_q8(p, ith, nth) : avx512::run_gemm_q8(p, ith, nth);
        case cpu::Q8::AvxVnni: return avx2::vnni::run_gemm_q8(p, ith, nth);
        case cpu::Q8::Avx2: return avx2::run_gemm_q8(p, ith, nth);
#endif
#if defined(__aarch64__) || defined(_M_ARM64)
        case cpu::Q8::NeonDot: return neon::run_gemm_q8(p, ith, nth);
#endif
        default: return portable::run_gemm_q8(p, ith, nth);
    }
}

// The i8c product on the same ISAs as q8_0's (kernels_i8.inc), AMX tiles summing the whole of k.
void run_i8(const Problem & p, int ith, int nth) {
    const cpu::Selection & s = cpu::selection();
    switch (s.q8) {
#ifndef JEPA_NO_X86_KERNELS
        case cpu::Q8::Avx512Vnni:
            return s.amx_int8 ? avx512::amx::run_gemm_i8(p, ith, nth) : avx512::run_gemm_i8(p, ith, nth);
        case cpu::Q8::AvxVnni: return avx2::vnni::run_gemm_i8(p, ith, nth);
        case cpu::Q8::Avx2: return avx2::run_gemm_i8(p, ith, nth);
#endif
#if defined(__aarch64__) || defined(_M_ARM64)
        case cpu::Q8::NeonDot: return neon::run_gemm_i8(p, ith, nth);
#endif
        default: return portable::run_gemm_i8(p, ith, nth);
    }
}

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
