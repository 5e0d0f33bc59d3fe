// Internals of the engine's GEMM (gemm.h): the packed layouts, the work split, and the per-ISA
// kernels, each compiled in its own file with its own target flags.
#pragma once

#include "caches.h"
#include "gemm.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace jepa::gemm::detail {

// f32 / f16 weights: panels of NR output columns, [K][NR] each (the last panel [K][N % NR]).
constexpr int64_t NR = 32;
// bf16 weights for AMX / AVX512-BF16: panels of NR16 columns with k in pairs, [K/2][NR16][2].
constexpr int64_t NR16 = 16;
// Rows of the AVX-512 micro-kernel (2 x MR accumulators of 16 lanes; the bf16 kernel's blocking too),
// and the blocking of rows and k (MC a multiple of every ISA's micro-kernel rows: 14, 6 (AVX2, NEON), 4).
constexpr int64_t MR = 14;
constexpr int64_t MC = 14 * 72;  // at most: a thread's rows in one block where they fit (1 MB of x)
constexpr int64_t KC = 256;
// Weights up to this many bytes stay in cache: with many rows the threads may split the rows and
// each read all of them; bigger weights are split by panels, so each is read from memory once.
constexpr int64_t SMALL_WEIGHT_BYTES = 4 << 20;
// k per block of the bf16 kernel (a multiple of its 32-wide tile step): one block for most products,
// so each block of y accumulates in the tiles without reloads. A bf16 result needs one block.
constexpr int64_t KC_BF16 = 2048;

// q8_0 weights for the int8 product (kernels_q8.inc): panels of NRQ columns, each [K/32][NRQ] f16
// scales then [K/32][8][NRQ][4] weights stored as w + 128 (the last panel N % NRQ wide): ggml's q8_0
// bytes, rearranged in place.
constexpr int64_t NRQ = 16;

// i8c weights (int8, one f32 scale per output column, a tensor of its own): panels of NRQ columns,
// each [K/4][NRQ][4] int8 stored as w + 128 (the last panel N % NRQ wide): the file's rows rearranged
// in place; the scales stay where they are (Problem::wscale).
enum class Layout : int { None = 0, F32 = 1, F16 = 2, Bf16Wide = 3, Bf16Pairs = 4, Q8 = 5, I8 = 6 };


// One product y[M][N] = act(x[M][K] W^T + b), rows of x and y at strides ldx / ldy (floats).
struct Problem {
    const float * x = nullptr;
    const uint16_t * x16 = nullptr;  // or bf16 rows (the bf16 kernel only), same stride ldx
    int64_t ldx = 0;
    float * y = nullptr;
    uint16_t * y16 = nullptr;  // or bf16 rows out (the bf16 kernel only, one k block), stride ldy
    int64_t ldy = 0;
    const void * w = nullptr;  // packed weight
    Layout layout = Layout::None;
    const float * wscale = nullptr;  // i8c: the weight's scale per output column [N]
    const float * bias = nullptr;
    const float * gate = nullptr;      // times gate (row stride ldg) before the residual, where given
    int64_t ldg = 0;
    const float * residual = nullptr;  // added last: y = act(x W^T + b) * gate + residual (row stride ldr)
    int64_t ldr = 0;
    int64_t M = 0, N = 0, K = 0;
    Epilogue epilogue = Epilogue::None;
};

// What a micro-kernel applies after the last k block: pointers already at its block's first row and
// column. The order (bias, activation, gate, residual) is the unfused graph's, so the bits are too.
struct Tail {
    const float * bias = nullptr;
    const float * gate = nullptr;
    int64_t ldg = 0;
    const float * residual = nullptr;
    int64_t ldr = 0;
    Epilogue epilogue = Epilogue::None;
};

// Rows in a thread's block where the weight stays in cache (each thread takes its own rows): the
// block fills at most half the L2, so it stays there while every panel streams past it (ViT-S/16 at
// batch 32 on a 1 MB L2, blocks of 1008 rows: 25.6 -> 24.6 ms per image at 476). Whole groups of
// `group` rows, at least one, at most MC.
inline int64_t l2_block_rows(int64_t row_bytes, int64_t group) {
    const int64_t rows = cpu::caches().l2 / 2 / row_bytes / group * group;
    return std::min(MC, std::max(group, rows));
}

// A thread's share: panels [p0, p1) for rows [m0, m1). Panels are split while there are enough of
// them; otherwise rows, in whole groups of `group` rows. Any split gives the same bits.
struct Share {
    int64_t p0, p1, m0, m1;
};
inline Share share_of(int64_t M, int64_t n_panels, int64_t group, int ith, int nth, bool rows_first = false) {
    if (nth <= 1) return {0, n_panels, 0, M};
    if ((n_panels >= 2 * nth && !rows_first) || M <= group) {
        return {n_panels * ith / nth, n_panels * (ith + 1) / nth, 0, M};
    }
    const int64_t n_groups = (M + group - 1) / group;
    return {0, n_panels, std::min(M, n_groups * ith / nth * group), std::min(M, n_groups * (ith + 1) / nth * group)};
}

// Scaled dot-product attention of every (item, head): softmax(q k^T scale + mask) v. Strides in
// floats; the row of token t, head h, item b of q is q + b q_item + t q_tok + h q_head (k, v alike);
// out's is out + b o_item + t o_tok + h hd. mask: NULL or [Nq][mask_ld] additive, shared by all.
struct Attention {
    const float * q = nullptr;
    const float * k = nullptr;
    const float * v = nullptr;
    float * out = nullptr;
    uint16_t * out16 = nullptr;  // or bf16 out (the bf16 kernel only), same strides
    int64_t q_tok = 0, q_head = 0, q_item = 0;
    int64_t k_tok = 0, k_head = 0, k_item = 0;
    int64_t v_tok = 0, v_head = 0, v_item = 0;
    int64_t o_tok = 0, o_item = 0;
    int64_t hd = 0, H = 0, Nq = 0, Nk = 0, B = 0;
    float scale = 1.0f;
    const void * mask = nullptr;
    bool mask_f16 = false;
    int64_t mask_ld = 0;
    bool one_kernel = false;  // the panel kernel even for a few keys (gemm.h, attention)

    // Query row q's mask row (f16 or f32 as mask_f16 says), or NULL without a mask.
    const void * mask_row(int64_t q) const {
        if (!mask) return nullptr;
        if (mask_f16) return static_cast<const uint16_t *>(mask) + q * mask_ld;
        return static_cast<const float *>(mask) + q * mask_ld;
    }
};
// Query rows per work unit of the attention (a multiple of MR).
constexpr int64_t QB = 4 * MR;

// At batch 1 each weight is read once per call, from memory: while one panel computes, the next
// panel's bytes are prefetched towards L2 a few lines per micro-kernel call, so the memory traffic
// overlaps the arithmetic instead of stalling the next panel's first read.
struct Prefetch {
    const char * at = nullptr;
    int64_t left = 0;
    void range(const void * p, int64_t bytes) {
        at = static_cast<const char *>(p);
        left = bytes;
    }
    void lines(int64_t n) {
        for (; n > 0 && left > 0; --n, at += 64, left -= 64) __builtin_prefetch(at, 0, 2);
    }
};

// n f32 values to bf16, rounded to nearest even as the bf16 kernel's own conversion does
// (VCVTNE2PS2BF16; gemm_bf16.cpp, called only where the CPU has AVX512-BF16).
void to_bf16_row(const float * src, int64_t n, uint16_t * dst);

// Every kernel's scratch comes from here: 64-byte aligned, or NULL (counted, see gemm.h's
// scratch_failures) when the memory is not there; a kernel then returns without computing and the
// context turns the count into a ResourceLimitError instead of a crash. JEPA_SCRATCH_LIMIT_BYTES caps
// one allocation (tests use it to make one fail).
void * scratch_alloc(size_t bytes);

// A thread's scratch buffers, one per slot a kernel holds at once: each grows as needed (through
// scratch_alloc) and is kept across calls. get() is NULL when the memory is not there.
enum class Slot : int { Rows, Panel, Panel2, Stage, Bias, Tail, Keys, Values, Scores, Probs, Count };
class Scratch {
  public:
    Scratch() = default;
    Scratch(const Scratch &) = delete;
    Scratch & operator=(const Scratch &) = delete;
    ~Scratch() { std::free(p_); }
    template <typename T> T * get(size_t count) {
        if (bytes_ < count * sizeof(T)) {
            std::free(p_);
            p_ = scratch_alloc(count * sizeof(T));
            bytes_ = p_ ? count * sizeof(T) : 0;
        }
        return static_cast<T *>(p_);
    }

  private:
    void * p_ = nullptr;
    size_t bytes_ = 0;
};
Scratch & thread_scratch(Slot slot);
template <typename T> T * scratch(Slot slot, size_t count) { return thread_scratch(slot).get<T>(count); }

// The f32 kernels of one ISA (kernels.inc, compiled once per ISA: gemm_avx512.cpp, gemm_avx2.cpp,
// gemm_neon.cpp, gemm_portable.cpp). Each computes its thread's share; all give the same bits.
struct KernelSet {
    void (*gemm)(const Problem & p, int ith, int nth);
    void (*attention)(const Attention & a, int ith, int nth);
    // LayerNorm of rows [r0, r1) of x [rows][n] (row strides ldx, ldy): (x - mean) / sqrt(var + eps),
    // then * w and + b where given; mean and variance in f32 over the row. y16: bf16 out instead
    // (CPUs with AVX512-BF16 only).
    void (*layer_norm)(const float * x, int64_t ldx, float * y, uint16_t * y16, int64_t ldy, int64_t n, int64_t r0,
                       int64_t r1, const float * w, const float * b, float eps);
    // adaLN-zero's norm of rows [r0, r1): LayerNorm(x) without affine (eps_mod), * (1 + scale) + shift,
    // then LayerNorm with w and b (eps). shift and scale rows at stride ldm (views into the modulation).
    void (*adaln)(const float * x, int64_t ldx, const float * shift, const float * scale, int64_t ldm, float * y,
                  int64_t ldy, int64_t n, int64_t r0, int64_t r1, const float * w, const float * b, float eps_mod,
                  float eps);
    void (*gelu)(const float * x, float * y, int64_t n);  // the exact-erf GELU of the epilogue
    void (*silu)(const float * x, float * y, int64_t n);
};
// The q8_0 and i8c products of each ISA (kernels_q8.inc, kernels_i8.inc: AVX-512 VNNI in gemm_q8_vnni.cpp):
// each gives the same bits on all.
namespace avx512 {
extern const KernelSet kernels;
void run_gemm_q8(const Problem & p, int ith, int nth);
void run_gemm_i8(const Problem & p, int ith, int nth);
namespace amx {
void run_gemm_q8(const Problem & p, int ith, int nth);  // AMX-INT8 tiles (gemm_q8_amx.cpp)
void run_gemm_i8(const Problem & p, int ith, int nth);
}
}
namespace avx2 {
extern const KernelSet kernels;
void run_gemm_q8(const Problem & p, int ith, int nth);
void run_gemm_i8(const Problem & p, int ith, int nth);
namespace vnni {
void run_gemm_q8(const Problem & p, int ith, int nth);  // AVX-VNNI's ymm VPDPBUSD (gemm_q8_avxvnni.cpp)
void run_gemm_i8(const Problem & p, int ith, int nth);
}
}
namespace neon {
extern const KernelSet kernels;  // aarch64 builds only
void run_gemm_q8(const Problem & p, int ith, int nth);  // SDOT, where HWCAP has DotProd (gemm_q8_neon.cpp)
void run_gemm_i8(const Problem & p, int ith, int nth);
}
namespace portable {
extern const KernelSet kernels;
void run_gemm_q8(const Problem & p, int ith, int nth);
void run_gemm_i8(const Problem & p, int ith, int nth);
}

// The bf16 kernels (gemm_bf16.cpp: AMX or AVX512-BF16).
void run_bf16(const Problem & p, int ith, int nth, bool amx);
void run_attention_bf16(const Attention & a, int ith, int nth, bool amx);

}  // namespace jepa::gemm::detail
