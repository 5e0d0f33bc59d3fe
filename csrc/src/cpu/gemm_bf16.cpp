// The bf16 kernels: AMX tiles where the CPU and the OS allow them, else AVX512-BF16 (VDPBF16PS).
// Activations are rounded to bf16 (nearest even) block by block; products accumulate in f32.
// Weights are packed in k pairs, [K/2][16][2] per 16-column panel: one AMX B tile row, one zmm.
#include "gemm_kernels.h"
#include "simd_avx512.h"

#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace jepa::gemm::detail {

namespace {

using avx512::lanes;
// The f32 kernels' exp and GELU (simd_math.inc) on one zmm.
__m512 exp_ps(__m512 x) { return avx512::vexp({x}).v; }
__m512 gelu_erf_ps(__m512 x) { return avx512::vgelu({x}).v; }

constexpr int64_t TM = 16;        // rows of an AMX tile
constexpr int64_t TK = 32;        // k per tile step (16 pairs)
// Rows per block of activations: a thread's rows in one block up to 512 (each weight is then read
// once per call), else blocks of 512.
constexpr int64_t MCB = 512;
constexpr int64_t KCB = KC_BF16;

// Rows [m0, m0 + mc) x k [k0, k0 + kc) of x as bf16, [mc rounded up to 32][kcp] (kcp = kc rounded up to
// 32), zero-padded, so every tile load reads defined values.
uint16_t * convert_rows(const Problem & p, int64_t m0, int64_t mc, int64_t k0, int64_t kc, int64_t kcp) {
    const int64_t rows = (mc + 31) / 32 * 32;
    uint16_t * a = scratch<uint16_t>(Slot::Rows, size_t(rows * kcp));
    if (!a) return nullptr;
    for (int64_t r = 0; r < rows; ++r) {
        uint16_t * dst = a + r * kcp;
        if (r >= mc) {
            std::memset(dst, 0, size_t(kcp) * 2);
            continue;
        }
        if (p.x16) {
            std::memcpy(dst, p.x16 + (m0 + r) * p.ldx + k0, size_t(kc) * 2);
            std::memset(dst + kc, 0, size_t(kcp - kc) * 2);
            continue;
        }
        const float * src = p.x + (m0 + r) * p.ldx + k0;
        for (int64_t k = 0; k < kcp; k += 32) {
            const __mmask16 lo = lanes(kc - k), hi = lanes(kc - k - 16);
            const __m512 f0 = _mm512_maskz_loadu_ps(lo, src + k), f1 = _mm512_maskz_loadu_ps(hi, src + k + 16);
            _mm512_storeu_si512(dst + k, (__m512i) _mm512_cvtne2ps_pbh(f1, f0));
        }
    }
    return a;
}

// Weight rows k [k0, k0 + kc) of 16-column panel `pi` as pairs: the packed weight itself when the
// panel is full and kc covers whole tile steps, else a zero-padded copy [kcp/2][16][2].
const uint16_t * weight_panel(const Problem & p, int64_t pi, int64_t k0, int64_t kc, int64_t kcp, Slot slot) {
    const int64_t width = std::min(NR16, p.N - pi * NR16);
    const uint16_t * src = static_cast<const uint16_t *>(p.w) + pi * NR16 * p.K + k0 * width;
    if (width == NR16 && kc == kcp) return src;
    uint16_t * dst = scratch<uint16_t>(slot, size_t(kcp * NR16));
    if (!dst) return nullptr;
    std::memset(dst, 0, size_t(kcp * NR16) * 2);
    for (int64_t kp = 0; kp < kc / 2; ++kp) std::memcpy(dst + kp * 2 * NR16, src + kp * 2 * width, size_t(width) * 4);
    return dst;
}

// Bias (unless the tiles started from it) and activation on a finished block of y, then the gate,
// the residual and the store of the rows and columns that exist.
void finish(const Problem & p, const float * c, int64_t ldc, int64_t rows, int64_t n0, int64_t cols, int64_t yoff,
            const float * gate, const float * res, bool bias_done) {
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; j += 16) {
            const __mmask16 m = lanes(cols - j);
            __m512 v = _mm512_maskz_loadu_ps(m, c + i * ldc + j);
            if (p.bias && !bias_done) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, p.bias + n0 + j));
            if (p.epilogue == Epilogue::GeluErf) v = gelu_erf_ps(v);
            if (gate) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, gate + i * p.ldg + j));
            if (p.residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res + i * p.ldr + j));
            if (p.y16) {
                _mm256_mask_storeu_epi16(p.y16 + yoff + i * p.ldy + j, m, (__m256i) _mm512_cvtneps_pbh(v));
            } else {
                _mm512_mask_storeu_ps(p.y + yoff + i * p.ldy + j, m, v);
            }
        }
    }
}

// ---- AMX ----------------------------------------------------------------------------------------

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

void amx_configure() {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

// A 32 x 32 block of y (2 x 2 tiles: tmm0..3), k over [0, kcp) of the converted rows `a` (row stride
// kcp) against the weight panels b0, b1; c holds the block (row stride ldc). The tiles start from c
// (carry), from `init` (16 rows of 32 values: the bias, so the sum starts from it), or from zero.
void amx_block(const uint16_t * a, int64_t lda_elems, int64_t kcp, const uint16_t * b0, const uint16_t * b1, float * c,
               int64_t ldc, bool carry, Prefetch * pf = nullptr, int64_t pf_lines = 0, const float * init = nullptr) {
    const size_t lda = size_t(lda_elems) * 2, ldcb = size_t(ldc) * 4;
    if (!carry && init) {
        _tile_loadd(0, init, 128);
        _tile_loadd(1, init + 16, 128);
        _tile_loadd(2, init, 128);
        _tile_loadd(3, init + 16, 128);
    } else if (carry) {
        _tile_loadd(0, c, ldcb);
        _tile_loadd(1, c + 16, ldcb);
        _tile_loadd(2, c + 16 * ldc, ldcb);
        _tile_loadd(3, c + 16 * ldc + 16, ldcb);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t k = 0; k < kcp; k += TK) {
        if (pf) pf->lines(pf_lines);
        _tile_loadd(4, a + k, lda);
        _tile_loadd(5, a + TM * lda_elems + k, lda);
        _tile_loadd(6, b0 + k * NR16, 64);
        _tile_loadd(7, b1 + k * NR16, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, ldcb);
    _tile_stored(1, c + 16, ldcb);
    _tile_stored(2, c + 16 * ldc, ldcb);
    _tile_stored(3, c + 16 * ldc + 16, ldcb);
}

// ---- AVX512-BF16 ------------------------------------------------------------------------------

// R rows x 32 columns, k pairs in order; the accumulator block lives in c (row stride ldc).
template <int R>
void dp_block(const uint16_t * a, int64_t lda, int64_t kcp, const uint16_t * b0, const uint16_t * b1, float * c,
              int64_t ldc, bool carry) {
    __m512 c0[R], c1[R];
    for (int i = 0; i < R; ++i) {
        c0[i] = carry ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
        c1[i] = carry ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
    }
    for (int64_t kp = 0; kp < kcp / 2; ++kp) {
        const __m512bh w0 = (__m512bh) _mm512_load_si512(b0 + kp * 2 * NR16);
        const __m512bh w1 = (__m512bh) _mm512_load_si512(b1 + kp * 2 * NR16);
        for (int i = 0; i < R; ++i) {
            int32_t pair;
            std::memcpy(&pair, a + i * lda + 2 * kp, 4);
            const __m512bh ai = (__m512bh) _mm512_set1_epi32(pair);
            c0[i] = _mm512_dpbf16_ps(c0[i], ai, w0);
            c1[i] = _mm512_dpbf16_ps(c1[i], ai, w1);
        }
    }
    for (int i = 0; i < R; ++i) {
        _mm512_storeu_ps(c + i * ldc, c0[i]);
        _mm512_storeu_ps(c + i * ldc + 16, c1[i]);
    }
}

}  // namespace

void run_bf16(const Problem & p, int ith, int nth, bool amx) {
    const int64_t n_panels = (p.N + NR16 - 1) / NR16;
    const int64_t n_pairs = (n_panels + 1) / 2;
    // Many rows and a weight that stays in cache: split the rows, so each thread converts only its
    // own; else split the weight's panels, so each is read from memory once.
    const Share s = share_of(p.M, n_pairs, 32, ith, nth, p.M >= 512 && p.N * p.K * 2 <= SMALL_WEIGHT_BYTES);
    if (s.p0 >= s.p1 || s.m0 >= s.m1) return;
    if (amx) amx_configure();
    // The block being accumulated: 32 x 32 f32, staged when it is not a whole block of y.
    float * stage = scratch<float>(Slot::Stage, 32 * 32);
    // AMX tiles start from the bias: 16 rows of the pair's 32 bias values.
    float * bias_rows = scratch<float>(Slot::Bias, 16 * 32);
    if (!stage || !bias_rows) {
        if (amx) _tile_release();
        return;  // no scratch: counted, the context reports it
    }
    const int64_t mcb = std::min(MCB, (s.m1 - s.m0 + 31) / 32 * 32);
    for (int64_t m0 = s.m0; m0 < s.m1; m0 += mcb) {
        const int64_t mc = std::min(mcb, s.m1 - m0);
        for (int64_t k0 = 0; k0 < p.K; k0 += KCB) {
            const int64_t kc = std::min(KCB, p.K - k0), kcp = (kc + TK - 1) / TK * TK;
            const bool carry = k0 > 0, last = k0 + kc == p.K;
            // bf16 rows in whole tile steps are read in place; others are converted (f32) or copied.
            const bool direct = p.x16 != nullptr && kc == kcp;
            const uint16_t * a = direct ? nullptr : convert_rows(p, m0, mc, k0, kc, kcp);
            if (!direct && !a) break;
            for (int64_t q = s.p0; q < s.p1; ++q) {
                const int64_t n0 = q * 2 * NR16, cols = std::min<int64_t>(32, p.N - n0);
                const uint16_t * b0 = weight_panel(p, 2 * q, k0, kc, kcp, Slot::Panel);
                // A lone last panel pairs with itself; the block's second half of columns is dropped.
                const uint16_t * b1 = 2 * q + 1 < n_panels ? weight_panel(p, 2 * q + 1, k0, kc, kcp, Slot::Panel2) : b0;
                if (!b0 || !b1) break;
                // The next pair's first panel (the second follows it in memory only k blocks later).
                // Only where each weight is read once (one block of rows); else they stay in cache.
                const bool once = mcb >= s.m1 - s.m0;
                Prefetch next;
                if (once && q + 1 < s.p1) {
                    const int64_t n1 = (q + 1) * 2 * NR16, wn = std::min(NR16, p.N - n1);
                    next.range(static_cast<const uint16_t *>(p.w) + n1 * p.K + k0 * wn, 2 * kc * wn);
                }
                Prefetch next2;
                if (once && q + 1 < s.p1 && (q + 1) * 2 * NR16 + NR16 < p.N) {
                    const int64_t n2 = (q + 1) * 2 * NR16 + NR16, wn = std::min(NR16, p.N - n2);
                    next2.range(static_cast<const uint16_t *>(p.w) + n2 * p.K + k0 * wn, 2 * kc * wn);
                }
                const bool bias_init = amx && p.bias != nullptr;
                if (bias_init && k0 == 0) {
                    for (int64_t i = 0; i < 16; ++i) {
                        for (int64_t j = 0; j < 32; ++j) bias_rows[i * 32 + j] = n0 + j < p.N ? p.bias[n0 + j] : 0.0f;
                    }
                }
                const int64_t steps = (mc + 31) / 32 * (kcp / TK);
                const int64_t per_step = (next.left / 64 + steps - 1) / steps;
                for (int64_t r = 0; r < mc; r += 32) {
                    const int64_t rows = std::min<int64_t>(32, mc - r);
                    const int64_t yoff = (m0 + r) * p.ldy + n0;
                    // bf16 out goes through the f32 stage (one k block: no carry to keep in y).
                    const bool whole = rows == 32 && cols == 32 && !p.y16;
                    float * c = whole ? p.y + yoff : stage;
                    const int64_t ldc = whole ? p.ldy : 32;
                    if (!whole) {
                        std::memset(stage, 0, 32 * 32 * 4);
                        if (carry) {
                            for (int64_t i = 0; i < rows; ++i) std::memcpy(stage + i * 32, p.y + yoff + i * p.ldy, size_t(cols) * 4);
                        }
                    }
                    // This row block's activations: in place, or from the converted block.
                    const uint16_t * ar = a ? a + r * kcp : p.x16 + (m0 + r) * p.ldx + k0;
                    int64_t lda = a ? kcp : p.ldx;
                    if (!a && rows < 32) {
                        // The last rows: copied into a zero-padded block, as a tile reads 32 rows.
                        uint16_t * tail = scratch<uint16_t>(Slot::Tail, size_t(32 * kcp));
                        if (!tail) break;
                        std::memset(tail, 0, size_t(32 * kcp) * 2);
                        for (int64_t i = 0; i < rows; ++i) std::memcpy(tail + i * kcp, ar + i * p.ldx, size_t(kcp) * 2);
                        ar = tail;
                        lda = kcp;
                    }
                    if (amx) {
                        // Half the steps prefetch the next pair's first panel, half its second.
                        Prefetch * pf = next.left > 0 ? &next : next2.left > 0 ? &next2 : nullptr;
                        amx_block(ar, lda, kcp, b0, b1, c, ldc, carry, pf, 2 * per_step, bias_init ? bias_rows : nullptr);
                    } else {
                        for (int64_t i = 0; i < 32; i += 8) dp_block<8>(ar + i * lda, lda, kcp, b0, b1, c + i * ldc, ldc, carry);
                    }
                    const bool plain = p.epilogue == Epilogue::None && !p.gate && !p.residual && (bias_init || !p.bias);
                    if (last && whole && plain) {
                        // Nothing left to apply: the tiles were stored into y.
                    } else if (last) {
                        finish(p, c, ldc, rows, n0, cols, yoff, p.gate ? p.gate + (m0 + r) * p.ldg + n0 : nullptr,
                               p.residual ? p.residual + (m0 + r) * p.ldr + n0 : nullptr, bias_init);
                    } else if (!whole) {
                        for (int64_t i = 0; i < rows; ++i) std::memcpy(p.y + yoff + i * p.ldy, stage + i * 32, size_t(cols) * 4);
                    }
                }
            }
        }
    }
    if (amx) _tile_release();
}

namespace {

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// n f32 values -> bf16, zero-padded to np (a multiple of 32).
void bf16_row(const float * src, int64_t n, int64_t np, uint16_t * dst) {
    for (int64_t j = 0; j < np; j += 32) {
        const __mmask16 lo = lanes(n - j), hi = lanes(n - j - 16);
        const __m512 f0 = _mm512_maskz_loadu_ps(lo, src + j), f1 = _mm512_maskz_loadu_ps(hi, src + j + 16);
        _mm512_storeu_si512(dst + j, (__m512i) _mm512_cvtne2ps_pbh(f1, f0));
    }
}

}  // namespace

void to_bf16_row(const float * src, int64_t n, uint16_t * dst) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) _mm256_storeu_si256((__m256i *) (dst + j), (__m256i) _mm512_cvtneps_pbh(_mm512_loadu_ps(src + j)));
    if (j < n) {
        const __mmask16 m = lanes(n - j);
        _mm256_mask_storeu_epi16(dst + j, m, (__m256i) _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + j)));
    }
}

// The half-precision attention of bf16 models: q k^T and p v as bf16 products (AMX tiles or
// VDPBF16PS), scale, mask and softmax in f32. Units are (item, head, 32 query rows); each output
// row depends on its own query row only, so batches and threads keep their bits.
void run_attention_bf16(const Attention & a, int ith, int nth, bool amx) {
    const int64_t n_qb = (a.Nq + 31) / 32, units = a.B * a.H * n_qb;
    const int64_t u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    if (u0 >= u1) return;
    const int64_t hdp = round_up(a.hd, 32), nkp = round_up(a.Nk, 32);
    uint16_t * qb16 = scratch<uint16_t>(Slot::Rows, size_t(32 * hdp));
    uint16_t * kt = scratch<uint16_t>(Slot::Keys, size_t(nkp * hdp));   // [Nk/16][hd/2][16][2]: k^T
    uint16_t * vp = scratch<uint16_t>(Slot::Values, size_t(nkp * hdp));   // [hd/16][Nk/2][16][2]: v
    float * sc = scratch<float>(Slot::Scores, size_t(32 * nkp));
    uint16_t * pb = scratch<uint16_t>(Slot::Probs, size_t(32 * nkp));
    float * stage = scratch<float>(Slot::Stage, 32 * 32);
    if (!qb16 || !kt || !vp || !sc || !pb || !stage) return;  // no scratch: counted, the context reports it
    if (amx) amx_configure();
    auto block = [&](const uint16_t * x, int64_t kcp, const uint16_t * b0, const uint16_t * b1, float * c, int64_t ldc) {
        if (amx) {
            amx_block(x, kcp, kcp, b0, b1, c, ldc, false);
        } else {
            for (int64_t i = 0; i < 32; i += 8) dp_block<8>(x + i * kcp, kcp, kcp, b0, b1, c + i * ldc, ldc, false);
        }
    };
    int64_t packed_b = -1, packed_h = -1;
    for (int64_t u = u0; u < u1; ++u) {
        const int64_t b = u / (a.H * n_qb), h = (u / n_qb) % a.H, q0 = (u % n_qb) * 32;
        const int64_t rows = std::min<int64_t>(32, a.Nq - q0);
        if (b != packed_b || h != packed_h) {
            // k^T (the product's k is d, its n the keys): each key's row becomes hdp/2 words of d
            // pairs, and word d2 of key j lands at [panel j/16][d2][j%16].
            const float * kb = a.k + b * a.k_item + h * a.k_head;
            uint32_t * kt32 = reinterpret_cast<uint32_t *>(kt);
            uint32_t * row32 = reinterpret_cast<uint32_t *>(qb16);  // qb16 is free until the query rows
            for (int64_t key = 0; key < nkp; ++key) {
                if (key < a.Nk) {
                    bf16_row(kb + key * a.k_tok, a.hd, hdp, reinterpret_cast<uint16_t *>(row32));
                } else {
                    std::memset(row32, 0, size_t(hdp) * 2);
                }
                uint32_t * panel = kt32 + (key / NR16) * (hdp / 2) * NR16 + key % NR16;
                for (int64_t d2 = 0; d2 < hdp / 2; ++d2) panel[d2 * NR16] = row32[d2];
            }
            // v (the product's k is the key, its n is d): rows 2 k2 and 2 k2 + 1 interleaved.
            const float * vb = a.v + b * a.v_item + h * a.v_head;
            for (int64_t p = 0; p < hdp / NR16; ++p) {
                uint16_t * panel = vp + p * nkp * NR16;
                const __mmask16 m = lanes(a.hd - p * NR16);
                for (int64_t k2 = 0; k2 < nkp / 2; ++k2) {
                    const int64_t r0 = 2 * k2, r1 = 2 * k2 + 1;
                    const __m512 v0 = r0 < a.Nk ? _mm512_maskz_loadu_ps(m, vb + r0 * a.v_tok + p * NR16) : _mm512_setzero_ps();
                    const __m512 v1 = r1 < a.Nk ? _mm512_maskz_loadu_ps(m, vb + r1 * a.v_tok + p * NR16) : _mm512_setzero_ps();
                    const __m512i w0 = _mm512_cvtepu16_epi32((__m256i) _mm512_cvtneps_pbh(v0));
                    const __m512i w1 = _mm512_cvtepu16_epi32((__m256i) _mm512_cvtneps_pbh(v1));
                    _mm512_store_si512(panel + k2 * 2 * NR16, _mm512_or_si512(w0, _mm512_slli_epi32(w1, 16)));
                }
            }
            packed_b = b;
            packed_h = h;
        }
        // The query rows as bf16 [32][hdp], zero-padded.
        const float * qrow = a.q + b * a.q_item + q0 * a.q_tok + h * a.q_head;
        for (int64_t r = 0; r < 32; ++r) {
            if (r < rows) {
                bf16_row(qrow + r * a.q_tok, a.hd, hdp, qb16 + r * hdp);
            } else {
                std::memset(qb16 + r * hdp, 0, size_t(hdp) * 2);
            }
        }
        for (int64_t j = 0; j < nkp / 32; ++j) {
            block(qb16, hdp, kt + (2 * j) * hdp * NR16, kt + (2 * j + 1) * hdp * NR16, sc + 32 * j, nkp);
        }
        // Softmax per row in f32 in two passes: the scaled, masked scores and their max; then
        // e = exp(s - max) straight to bf16 as p (zero past the last key and row) with its sum, the
        // division by which is applied to the output rows (one row of hd values, not of Nk).
        float inv_sum[32];
        for (int64_t r = 0; r < 32; ++r) {
            uint16_t * prow = pb + r * nkp;
            if (r >= rows) {
                std::memset(prow, 0, size_t(nkp) * 2);
                continue;
            }
            float * srow = sc + r * nkp;
            const void * mrow = a.mask_row(q0 + r);
            __m512 mx = _mm512_set1_ps(-INFINITY);
            for (int64_t j = 0; j < a.Nk; j += 16) {
                const __mmask16 m = lanes(a.Nk - j);
                __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, srow + j), _mm512_set1_ps(a.scale));
                if (mrow) {
                    v = _mm512_add_ps(v, a.mask_f16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t *>(mrow) + j))
                                                    : _mm512_maskz_loadu_ps(m, static_cast<const float *>(mrow) + j));
                }
                _mm512_mask_storeu_ps(srow + j, m, v);
                mx = _mm512_mask_max_ps(mx, m, mx, v);
            }
            const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
            __m512 sum = _mm512_setzero_ps();
            for (int64_t j = 0; j < nkp; j += 32) {
                const __mmask16 lo = lanes(a.Nk - j), hi = lanes(a.Nk - j - 16);
                const __m512 e0 = _mm512_maskz_mov_ps(lo, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(lo, srow + j), vmax)));
                const __m512 e1 = _mm512_maskz_mov_ps(hi, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(hi, srow + j + 16), vmax)));
                sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
                _mm512_storeu_si512(prow + j, (__m512i) _mm512_cvtne2ps_pbh(e1, e0));
            }
            inv_sum[r] = 1.0f / _mm512_reduce_add_ps(sum);
        }
        // out rows = p v / sum, 32 columns of d at a time through the stage (f32 or bf16 out).
        const int64_t ooff = b * a.o_item + q0 * a.o_tok + h * a.hd;
        for (int64_t j = 0; j < hdp / 32; ++j) {
            const int64_t cols = std::min<int64_t>(32, a.hd - 32 * j);
            block(pb, nkp, vp + (2 * j) * nkp * NR16, vp + (2 * j + 1) * nkp * NR16, stage, 32);
            for (int64_t r = 0; r < rows; ++r) {
                const __m512 inv = _mm512_set1_ps(inv_sum[r]);
                for (int64_t c = 0; c < cols; c += 16) {
                    const __mmask16 m = lanes(cols - c);
                    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, stage + r * 32 + c), inv);
                    if (a.out16) {
                        _mm256_mask_storeu_epi16(a.out16 + ooff + r * a.o_tok + 32 * j + c, m, (__m256i) _mm512_cvtneps_pbh(v));
                    } else {
                        _mm512_mask_storeu_ps(a.out + ooff + r * a.o_tok + 32 * j + c, m, v);
                    }
                }
            }
        }
    }
    if (amx) _tile_release();
}

}  // namespace jepa::gemm::detail
