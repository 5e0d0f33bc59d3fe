// Shared graph blocks: every encoder, predictor and head is assembled from these. Each choice between
// the engine's fused CPU ops (cpu/gemm.h) and ggml's own is made here, and only here.
#pragma once

#include "cpu/gemm.h"
#include "hparams.h"
#include "model.h"

#include "ggml.h"

namespace jepa {

struct AttnOptions {
    int n_head = 1;
    float scale = 1.0f;
    bool flash = false;            // ggml_flash_attn_ext instead of matmul + softmax + matmul
    ggml_tensor * mask = nullptr;  // additive [n_kv, n_q] mask (f32, or f16 for flash), or NULL
    ggml_tensor * rope_cos = nullptr;  // 3-D RoPE tables [head_dim, 1, N, 1 or B] applied to q and k
    ggml_tensor * rope_sin = nullptr;  // (see rope.h), or NULL for none
    bool own_kernels = false;  // the engine's own CPU attention (gemm.h) where it applies; else ggml's
    bool half = false;         // ... with its products in bf16 (a bf16 model's half class)
    bool bf16_out = false;     // ... and its result in bf16, for a bf16 product that reads it
    bool one_kernel = false;   // ... with one kernel for every key count (never the few-key one): a
                               // frame-causal rollout's cached frames then give the recomputed ones' bits
    const gemm::KeyRanges * ranges = nullptr;  // each query group's key range (block-causal), or NULL:
                                               // no mask; it must outlive the graph's compute
};

// The attention options every graph starts from: n_head heads scaled by 1/sqrt(head_dim), and the
// engine's own CPU attention where flash is asked for (or auto); flash = false keeps ggml's plain
// matmul + softmax + matmul graph, with its score matrix. Masks and RoPE tables are the graph's own.
AttnOptions attn_options(const Model & m, int n_head, int head_dim, bool flash);

// Name t, mark it a graph output and expand the graph to it; returns t.
ggml_tensor * graph_output(ggml_cgraph * graph, ggml_tensor * t, const char * name);

// LayerNorm with its affine; bf16_out asks for a bf16 result (for a product that reads bf16: granted
// on the engine's own kernel only, f32 elsewhere).
ggml_tensor * build_norm(ggml_context * ctx, ggml_tensor * x, const NormW & n, float eps, bool bf16_out = false);
// x W^T + b, times `gate` and plus `residual` (each the result's shape) when given: fused into the
// product's pass on the engine's own CPU kernel, a ggml_mul and a ggml_add otherwise (the same bits
// either way). gate may be a view (the engine's kernel reads it in place).
ggml_tensor * build_linear(ggml_context * ctx, ggml_tensor * x, const LinearW & l, ggml_tensor * residual = nullptr,
                           ggml_tensor * gate = nullptr);
// own: the graph runs on the engine's CPU kernels (the producing product is packed): GELU-erf and
// SiLU then use the engine's own, whose bits do not depend on how ggml was compiled.
ggml_tensor * build_act(ggml_context * ctx, ggml_tensor * x, Act act, bool own = false);
// LayerNorm without an affine, on the engine's kernel where `own` (as build_act).
ggml_tensor * build_plain_norm(ggml_context * ctx, ggml_tensor * x, float eps, bool own);
ggml_tensor * build_mlp(ggml_context * ctx, ggml_tensor * x, const LinearW & up, const LinearW & down, Act act,
                        ggml_tensor * residual = nullptr, ggml_tensor * gate = nullptr);

// Scaled dot-product attention over heads. q, k, v: [head_dim, n_head, n_tok, B] (views are fine);
// returns [head_dim * n_head, n_q, B], heads concatenated as PyTorch does.
ggml_tensor * build_attn(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, const AttnOptions & o);

// Attention per sequence over sequences laid end to end (text; gemm.h's Varlen): the engine's varlen
// kernel where `own` (CPU weights, flash asked for); elsewhere (CUDA, where custom ops do not run, or
// flash off) ggml's attention on each sequence's rows and a concatenation.
ggml_tensor * build_varlen_attn(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                                const gemm::Varlen & varlen, bool own);

// adaLN-zero's modulated norms of a LeWM block, ln(LN(x) * (1 + scale) + shift) twice: fused when the
// engine's kernels run the block (`own`) and both norms' operands suit the one-pass kernel (the
// modulation's chunks then stay views, read in place); else ggml's ops on copies of the chunks.
struct AdalnNorms {
    bool fused = false;
    bool own = false;
};
AdalnNorms adaln_norms(const ggml_tensor * x, const ggml_tensor * shift1, const ggml_tensor * scale1, const NormW & ln1,
                       const ggml_tensor * shift2, const ggml_tensor * scale2, const NormW & ln2, bool own);
// One of them: the inner LN without affine (eps_mod), the outer with ln's (eps). The same bits either way.
ggml_tensor * build_adaln_norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * shift, ggml_tensor * scale,
                               const NormW & ln, float eps_mod, float eps, const AdalnNorms & how);

// Split x [D, N, B] projections into per-head 4-D views [head_dim, n_head, N, B].
struct Qkv {
    ggml_tensor * q;
    ggml_tensor * k;
    ggml_tensor * v;
};
Qkv build_qkv(ggml_context * ctx, ggml_tensor * x, const VitBlockW & b, int n_head);

// A pre-norm ViT block: x + ls1 * attn(ln1(x)); then x + ls2 * mlp(ln2(x)). Intermediate tensors are
// named "<prefix>.<layer>.attn_res" and "<prefix>.<layer>.out" (prefix e.g. "blk", "pred.blk").
ggml_tensor * build_vit_block(ggml_context * ctx, ggml_tensor * x, const VitBlockW & b, const BlockHparams & hp,
                              const AttnOptions & attn, int layer, const char * prefix = "blk");

// build_vit_block in two halves, for a graph that changes what the attention sees (a rollout's
// cached keys and values, rows shared by every item): the attention's inputs, ln1(x) projected to
// q, k, v with the options' RoPE; then the rest of the block from them (attention, residual, MLP).
Qkv build_block_qkv(ggml_context * ctx, ggml_tensor * x, const VitBlockW & b, const BlockHparams & hp,
                    const AttnOptions & attn);
ggml_tensor * build_vit_block_rest(ggml_context * ctx, ggml_tensor * x, const Qkv & qkv, const VitBlockW & b,
                                   const BlockHparams & hp, const AttnOptions & attn, int layer,
                                   const char * prefix = "blk");

}  // namespace jepa
