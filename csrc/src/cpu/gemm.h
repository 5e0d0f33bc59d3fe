// The engine's own CPU matrix products for weight matrices (a ggml custom op).
//
// A weight [N out][K in] is repacked once at load, in place, into column panels; a product then
// computes every output element as one FMA chain over k = 0..K-1 in order, whatever the number of
// rows, the blocking or the thread count. That is what makes a batch give each item the same bits as
// the item alone (ggml's own mul_mat takes another path for a single row). The f32 kernels are one
// source (kernels.inc) compiled per ISA: AVX-512, AVX2 + FMA + F16C (x86-64-v3) and portable C++;
// the same chains, the same exp / erf polynomials and the same reduction trees give the same bits on
// every one (and on ARM64's NEON kernels), so an f32 model's outputs do not depend on the CPU. bf16
// weights run AMX or AVX512-BF16 where the CPU has them (the half class: its own bits). q8_0 weights run
// an int8 product of their own (kernels_q8.inc: activations quantized per row and block of 32, exact
// int32 block sums met in f32 in k order: the quantized class, the same bits on every ISA, batch and
// thread count), on AMX-INT8, AVX-512 VNNI, AVX-VNNI, AVX2, NEON's SDOT or portable C++; i8c weights (int8
// with one scale per output column) the same ISAs' product over the whole of k (kernels_i8.inc: activations
// quantized per row, one exact int32 sum per output, scaled once: a class of its own). Which of these
// a process runs is its kernel path (paths.h: the CPU's features within JEPA_GEMM's row); a portable
// build reaches them all. The ops are in ops.cpp, the packing in pack.cpp, the kernels in gemm_<isa>.cpp.
#pragma once

#include "ggml.h"

#include <cstdint>
#include <vector>

namespace jepa::gemm {

// What follows the product in the same pass, before the store.
enum class Epilogue : int {
    None = 0,     // + bias (when present)
    GeluErf = 1,  // + bias, then 0.5 x (1 + erf(x / sqrt 2))
};

// The rows an i8c weight may have: whole 16-lane groups of k, and few enough that every int32 sum of
// int8 products (and the VNNI form's offset) stays exact.
constexpr int64_t I8_K_STEP = 16, I8_K_MAX = 65536;

// True when the engine's kernel takes this weight on this CPU (f32, f16, bf16, q8_0 or i8c; shape limits),
// wherever its data will lie: the loader gives these memory of their own (weights.h).
bool packable(const ggml_tensor * w);
// packable, and its data is in place: host memory, 64-byte aligned.
bool can_pack(const ggml_tensor * w);
// Repack w's data in place (host memory, 64-byte aligned) into the kernel's layout. Same byte size.
void pack_in_place(ggml_tensor * w);

// y = act(x W^T + b) * gate + residual for x [K, M, ...] (f32), a packed w [K, N], b [N], gate and
// residual [N, M, ...] all optional (gate may be a strided view, read in place); returns [N, M, ...].
// The epilogue's operations round as the unfused graph's (ggml_add, ggml_mul) do.
// x may be bf16 for a bf16 weight on the bf16 kernel (takes_bf16); out_bf16 asks for a bf16 result
// (granted there only, for a consumer that takes bf16). bf16 in or out rounds exactly as the kernel's
// own conversion of the f32 values would, so fused and unfused give the same bits.
bool takes_bf16(const ggml_tensor * w);
// wscale: an i8c weight's scales, f32 [N] (given exactly when w is i8).
ggml_tensor * linear(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, ggml_tensor * b, Epilogue e,
                     ggml_tensor * residual = nullptr, bool out_bf16 = false, ggml_tensor * gate = nullptr,
                     ggml_tensor * wscale = nullptr);

// LayerNorm over ne[0] of x (f32), then * w and + b where given (f32 [ne0] each), in one pass.
bool layer_norm_supported(const ggml_tensor * x, const ggml_tensor * w, const ggml_tensor * b);
ggml_tensor * layer_norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, ggml_tensor * b, float eps,
                         bool out_bf16 = false);

// adaLN-zero's modulated norm in one pass (LeWM's blocks): LayerNorm(LayerNorm(x) * (1 + scale) +
// shift) * w + b, the inner norm without affine (eps_mod), the outer with w and b (eps); x [D, ...]
// f32; shift and scale x's shape, views into the modulation [6 D, ...] read in place (one row stride
// for both). The unfused graph's operations in its order: the same bits as it on the engine's kernels.
bool adaln_norm_supported(const ggml_tensor * x, const ggml_tensor * shift, const ggml_tensor * scale,
                          const ggml_tensor * w, const ggml_tensor * b);
ggml_tensor * adaln_norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * shift, ggml_tensor * scale,
                         ggml_tensor * w, ggml_tensor * b, float eps_mod, float eps);

// Scaled dot-product attention, softmax(q k^T scale + mask) v, heads concatenated. q, k, v:
// [head_dim, n_head, n_tok, B] f32 with contiguous rows (strided views are fine); mask NULL or
// [n_kv, >= n_q] additive f32 / f16 shared by heads and items. Returns [head_dim * n_head, n_q, B].
// half: the products in bf16 (AMX / AVX512-BF16, softmax in f32), for bf16 models; else f32.
// A few keys (<= 16) take a kernel of their own, whose scores round differently; one_kernel keeps
// the panel kernel for every key count, so a query row's bits depend only on its keys' values (a
// masked key adds exact zeros): a frame-causal rollout's cached frames equal the recomputed ones.
bool attention_supported(const ggml_tensor * q, const ggml_tensor * k, const ggml_tensor * v, const ggml_tensor * mask);
ggml_tensor * attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                        float scale, bool half, bool out_bf16 = false, bool one_kernel = false);

// Attention per sequence over sequences laid end to end (text models, no padding): q, k, v
// [head_dim, n_head, n_tok, 1] f32 with contiguous rows; sequence s is tokens [offsets[s],
// offsets[s + 1]) and attends to itself only (a block-diagonal attention that computes no block off
// the diagonal). Returns [head_dim * n_head, n_tok, 1, 1] f32. A sequence's rows come out the same
// bits whatever the other sequences are. Runs on any CPU (the f32 kernels above; the portable ones
// on the ggml path too). `spec` must live until the graph has run.
struct Varlen {
    std::vector<int64_t> offsets;  // n_seq + 1, from 0 to n_tok
    float scale = 1.0f;
    bool half = false;             // the products in bf16 (bf16 models on a bf16 kernel)
};
bool varlen_attention_supported(const ggml_tensor * q, const ggml_tensor * k, const ggml_tensor * v);
ggml_tensor * varlen_attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, const Varlen * spec);

// Attention where each group of query rows reads one contiguous range of keys: group g's queries
// [q_start[g], q_start[g + 1]) attend keys [k_lo[g], k_hi[g]) of the same item, and nothing else
// is computed (a block-causal video encoder: the CLS row reads every key, frame f's patch rows the
// patch keys of frames <= f; no N x N mask exists). q, k, v [head_dim, n_head, n_tok, B] f32 with
// contiguous rows; returns [head_dim * n_head, n_tok, B] f32, or bf16 with out_bf16 (the bf16 kernel
// only). A row's bits depend on its own keys only: the same whatever the batch, the threads or the
// other groups. `spec` must live until the graph has run.
struct KeyRanges {
    std::vector<int64_t> q_start;  // n_groups + 1, from 0 to n_tok
    std::vector<int64_t> k_lo, k_hi;  // n_groups each, 0 <= lo < hi <= n_tok
    float scale = 1.0f;
    bool half = false;  // the products in bf16 (bf16 models on a bf16 kernel)

    // The block-causal ranges of n_prefix read-everything tokens then n_frames frames of per_frame
    // patch tokens (frame-major): prefix rows read all keys, a patch row the patches of frames <= its own.
    static KeyRanges block_causal(int64_t n_prefix, int64_t n_frames, int64_t per_frame);
    int64_t n_tok() const { return q_start.empty() ? 0 : q_start.back(); }
};
bool ranged_attention_supported(const ggml_tensor * q, const ggml_tensor * k, const ggml_tensor * v, const KeyRanges & spec);
ggml_tensor * ranged_attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, const KeyRanges * spec,
                               bool out_bf16 = false);

// How many kernel scratch allocations have failed in this process (a kernel that cannot get its
// scratch computes nothing): a caller compares it around a graph compute.
int64_t scratch_failures();

// Elementwise exact-erf GELU on n floats (the same function the epilogue applies).
void gelu_erf(const float * x, float * y, int64_t n);

// An activation of the engine's own as a graph op (x f32, any shape): the same bits on every path,
// where ggml's own (ggml_silu's vector exp, ggml_gelu_erf's libm erff) depend on how ggml was built.
enum class Unary : int { GeluErf = 0, Silu = 1 };
bool unary_supported(const ggml_tensor * x);
ggml_tensor * unary(ggml_context * ctx, ggml_tensor * x, Unary op);

}  // namespace jepa::gemm
