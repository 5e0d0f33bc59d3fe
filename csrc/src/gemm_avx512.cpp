// The AVX-512 FMA kernel for f32 weights (and f16 / bf16 weights widened to f32 panel by panel).
// Compiled with AVX-512 flags (CMakeLists.txt); called only when the CPU has them (gemm.cpp).
#include "erf_avx512.h"
#include "gemm_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

namespace jepa::gemm::detail {
namespace {

// R rows x 32 columns of y, k in [0, kc). Each element is one FMA chain: it starts from 0 at k = 0
// (or continues from y for later k blocks, exactly), so rows, blocks and threads never change a bit.
template <int R>
void micro(const float * x, int64_t ldx, const float * bp, int64_t kc, float * y, int64_t ldy,
           __mmask16 m0, __mmask16 m1, bool carry, const Tail * tail, Prefetch * pf) {
    __m512 c0[R], c1[R];
    const float * a[R];
    for (int i = 0; i < R; ++i) {
        a[i] = x + i * ldx;
        if (carry) {
            c0[i] = _mm512_maskz_loadu_ps(m0, y + i * ldy);
            c1[i] = _mm512_maskz_loadu_ps(m1, y + i * ldy + 16);
        } else {
            c0[i] = _mm512_setzero_ps();
            c1[i] = _mm512_setzero_ps();
        }
    }
    for (int64_t k = 0; k < kc; ++k) {
        // One line of the next panel every 8 k steps: spread out, prefetches never wait for a fill buffer.
        if ((k & 7) == 0 && pf) pf->lines(1);
        // b rows are always whole NR-wide panels (zero-padded where the matrix ends): masked loads
        // here measured 2.3x slower.
        const __m512 b0 = _mm512_load_ps(bp + NR * k);
        const __m512 b1 = _mm512_load_ps(bp + NR * k + 16);
        // Fully unrolled so the 2 R accumulators live in registers (GCC otherwise spills them).
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
            const __m512 ai = _mm512_set1_ps(a[i][k]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
    }
    if (tail) {
        if (const float * bias = tail->bias) {
            const __m512 bb0 = _mm512_maskz_loadu_ps(m0, bias), bb1 = _mm512_maskz_loadu_ps(m1, bias + 16);
            for (int i = 0; i < R; ++i) {
                c0[i] = _mm512_add_ps(c0[i], bb0);
                c1[i] = _mm512_add_ps(c1[i], bb1);
            }
        }
        if (tail->epilogue == Epilogue::GeluErf) {
            for (int i = 0; i < R; ++i) {
                c0[i] = gelu_erf_ps(c0[i]);
                c1[i] = gelu_erf_ps(c1[i]);
            }
        }
        if (const float * res = tail->residual) {
            for (int i = 0; i < R; ++i) {
                c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(m0, res + i * tail->ldr));
                c1[i] = _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(m1, res + i * tail->ldr + 16));
            }
        }
    }
    for (int i = 0; i < R; ++i) {
        _mm512_mask_storeu_ps(y + i * ldy, m0, c0[i]);
        _mm512_mask_storeu_ps(y + i * ldy + 16, m1, c1[i]);
    }
}

using MicroFn = void (*)(const float *, int64_t, const float *, int64_t, float *, int64_t, __mmask16,
                         __mmask16, bool, const Tail *, Prefetch *);
template <size_t... R>
constexpr std::array<MicroFn, sizeof...(R)> micro_table(std::index_sequence<R...>) {
    return {micro<int(R) + 1>...};
}

// The micro-kernel for a group of `rows` (1 .. MR) rows: micro<rows>, one instance per row count.
MicroFn kernel(int64_t rows) {
    static constexpr auto table = micro_table(std::make_index_sequence<MR>{});
    return table[size_t(std::clamp<int64_t>(rows, 1, MR) - 1)];
}

// Panel p's rows k0 .. k0+kc as [kc][NR] f32: the packed weight itself for a full f32 panel,
// else widened (f16, bf16) or zero-padded (a last panel narrower than NR) into the scratch.
const float * panel(const Problem & p, int64_t panel_i, int64_t k0, int64_t kc, int64_t width) {
    // A full f32 panel is read in place (its lines were prefetched while the previous panel ran).
    const int64_t base = panel_i * NR * p.K;  // every earlier panel is full
    if (p.layout == Layout::F32 && width == NR) return static_cast<const float *>(p.w) + base + k0 * NR;
    float * s = scratch<float>(Slot::Panel, size_t(KC * NR));  // [KC][NR], 64-byte aligned
    if (!s) return nullptr;  // counted: the context reports it
    const __mmask16 m0 = lanes(width), m1 = lanes(width - 16);
    if (p.layout == Layout::F32) {
        const float * src = static_cast<const float *>(p.w) + base + k0 * width;
        for (int64_t k = 0; k < kc; ++k) {
            _mm512_store_ps(s + NR * k, _mm512_maskz_loadu_ps(m0, src + width * k));
            _mm512_store_ps(s + NR * k + 16, _mm512_maskz_loadu_ps(m1, src + width * k + 16));
        }
    } else {
        // f16 (F16) or bf16 (Bf16Wide) panels, [K][width] 16-bit values: widened exactly.
        const uint16_t * src = static_cast<const uint16_t *>(p.w) + base + k0 * width;
        const bool half = p.layout == Layout::F16;
        for (int64_t k = 0; k < kc; ++k) {
            const __m256i h0 = _mm256_maskz_loadu_epi16(m0, src + width * k);
            const __m256i h1 = _mm256_maskz_loadu_epi16(m1, src + width * k + 16);
            if (half) {
                _mm512_store_ps(s + NR * k, _mm512_cvtph_ps(h0));
                _mm512_store_ps(s + NR * k + 16, _mm512_cvtph_ps(h1));
            } else {
                _mm512_store_ps(s + NR * k, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h0), 16)));
                _mm512_store_ps(s + NR * k + 16,
                                _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16)));
            }
        }
    }
    return s;
}

}  // namespace

void run_avx512(const Problem & p, int ith, int nth) {
    const int64_t n_panels = (p.N + NR - 1) / NR;
    // Many rows and a weight that stays in cache: each thread takes its own rows (ViT-S/16 at batch 8,
    // 2 threads: 30.1 -> 28.2 ms per image). Otherwise the panels are split, so each weight comes
    // from memory once, and a thread's rows run as one block where they fit (ViT-L/16 at batch 8 read
    // its 1.2 GB of weights six times over with 336-row blocks split by rows).
    const int64_t es = p.layout == Layout::F32 ? 4 : 2;
    const Share s = share_of(p.M, n_panels, MR, ith, nth, p.M >= 512 && p.N * p.K * es <= SMALL_WEIGHT_BYTES);
    const int64_t mcb = std::min(MC, (s.m1 - s.m0 + MR - 1) / MR * MR);
    for (int64_t m0 = s.m0; m0 < s.m1; m0 += mcb) {
        const int64_t mc = std::min(mcb, s.m1 - m0);
        for (int64_t k0 = 0; k0 < p.K; k0 += KC) {
            const int64_t kc = std::min(KC, p.K - k0);
            const bool carry = k0 > 0, last = k0 + kc == p.K;
            // The block of x, rows [m0, m0 + mc) x k [k0, k0 + kc), copied to rows kc + 16 floats
            // apart: x's own rows are K floats apart, 4 KB for ViT-L, and 14 of them map to one L1
            // set (ViT-L/16 f32 at batch 8 ran slower per image than at batch 1).
            const int64_t lda = kc + 16;
            float * ablk = scratch<float>(Slot::Rows, size_t(mc * lda));
            if (!ablk) return;  // no scratch: counted, the context reports it
            for (int64_t r = 0; r < mc; ++r) std::memcpy(ablk + r * lda, p.x + (m0 + r) * p.ldx + k0, size_t(kc) * 4);
            for (int64_t pi = s.p0; pi < s.p1; ++pi) {
                const int64_t n0 = pi * NR, width = std::min(NR, p.N - n0);
                const float * bp = panel(p, pi, k0, kc, width);
                if (!bp) return;
                const __mmask16 m0mask = lanes(width), m1mask = lanes(width - 16);
                Prefetch next;
                // Only where each weight is read once (one block of rows); else they stay in cache.
                if (pi + 1 < s.p1 && mcb >= s.m1 - s.m0) {
                    const int64_t wn = std::min(NR, p.N - n0 - NR);
                    next.range(static_cast<const char *>(p.w) + es * ((pi + 1) * NR * p.K + k0 * wn), es * kc * wn);
                }
                for (int64_t r = 0; r < mc; r += MR) {
                    const int64_t rows = std::min(MR, mc - r);
                    Tail t;
                    t.bias = p.bias ? p.bias + n0 : nullptr;
                    t.residual = p.residual ? p.residual + (m0 + r) * p.ldr + n0 : nullptr;
                    t.ldr = p.ldr;
                    t.epilogue = p.epilogue;
                    kernel(rows)(ablk + r * lda, lda, bp, kc, p.y + (m0 + r) * p.ldy + n0, p.ldy,
                                 m0mask, m1mask, carry, last ? &t : nullptr, next.left > 0 ? &next : nullptr);
                }
            }
        }
    }
}

namespace {

// Row i of the scores: scale, mask, softmax in place (max, exp, sum, then times 1 / sum, as PyTorch
// normalises before the product with v).
void softmax_row(float * s, int64_t n, float scale, const void * mask, bool f16) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = lanes(n - j);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), _mm512_set1_ps(scale));
        if (mask) {
            const __m512 mk = f16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t *>(mask) + j))
                                  : _mm512_maskz_loadu_ps(m, static_cast<const float *>(mask) + j);
            v = _mm512_add_ps(v, mk);
        }
        _mm512_mask_storeu_ps(s + j, m, v);
        mx = _mm512_mask_max_ps(mx, m, mx, v);
    }
    const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = lanes(n - j);
        const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), vmax));
        _mm512_mask_storeu_ps(s + j, m, e);
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = lanes(n - j);
        _mm512_mask_storeu_ps(s + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), inv));
    }
}

}  // namespace

// Attention over a few keys (LeWM's 3-frame window): packing k into 32-key panels would cost more
// than the products, so each (item, head) runs directly: a score is a dot product over the head
// dimension (16 lanes, then a fixed-order sum), an output row a chain of FMAs over the keys.
void small_attention(const Attention & a, int ith, int nth) {
    const int64_t units = a.B * a.H, u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    const int64_t chunks = (a.hd + 15) / 16;
    for (int64_t u = u0; u < u1; ++u) {
        const int64_t b = u / a.H, h = u % a.H;
        const float * qb = a.q + b * a.q_item + h * a.q_head;
        const float * kb = a.k + b * a.k_item + h * a.k_head;
        const float * vb = a.v + b * a.v_item + h * a.v_head;
        for (int64_t i = 0; i < a.Nq; ++i) {
            float s[16];
            const float * q = qb + i * a.q_tok;
            for (int64_t j = 0; j < a.Nk; ++j) {
                const float * k = kb + j * a.k_tok;
                __m512 acc = _mm512_setzero_ps();
                for (int64_t c = 0; c < chunks; ++c) {
                    const __mmask16 m = lanes(a.hd - 16 * c);
                    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + 16 * c), _mm512_maskz_loadu_ps(m, k + 16 * c), acc);
                }
                s[j] = _mm512_reduce_add_ps(acc);
            }
            softmax_row(s, a.Nk, a.scale, a.mask_row(i), a.mask_f16);
            float * o = a.out + b * a.o_item + i * a.o_tok + h * a.hd;
            for (int64_t c = 0; c < chunks; ++c) {
                const __mmask16 m = lanes(a.hd - 16 * c);
                __m512 acc = _mm512_setzero_ps();
                for (int64_t j = 0; j < a.Nk; ++j) {
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(s[j]), _mm512_maskz_loadu_ps(m, vb + j * a.v_tok + 16 * c), acc);
                }
                _mm512_mask_storeu_ps(o + 16 * c, m, acc);
            }
        }
    }
}

// Work units are (item, head, block of QB query rows); a thread takes a contiguous range. Every
// score is one FMA chain over the head dimension and every output one chain over the keys, so
// neither the split nor the other items change a bit.
void run_attention(const Attention & a, int ith, int nth) {
    if (a.Nk <= 16) {
        small_attention(a, ith, nth);
        return;
    }
    const int64_t n_qb = (a.Nq + QB - 1) / QB, units = a.B * a.H * n_qb;
    const int64_t u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    const int64_t key_panels = (a.Nk + NR - 1) / NR, lds = key_panels * NR;
    float * kt = scratch<float>(Slot::Keys, size_t(key_panels * a.hd * NR));
    float * sc = scratch<float>(Slot::Scores, size_t(QB * lds));
    const int64_t d_panels = (a.hd + NR - 1) / NR;
    float * vp = scratch<float>(Slot::Values, size_t(d_panels * a.Nk * NR));
    if (!kt || !sc || !vp) return;  // no scratch: counted, the context reports it
    int64_t packed_b = -1, packed_h = -1;
    for (int64_t u = u0; u < u1; ++u) {
        const int64_t b = u / (a.H * n_qb), h = (u / n_qb) % a.H, q0 = (u % n_qb) * QB;
        const int64_t rows = std::min(QB, a.Nq - q0);
        if (b != packed_b || h != packed_h) {
            // k^T as panels of NR keys, [hd][NR] each, zero-padded past the last key.
            const float * kb = a.k + b * a.k_item + h * a.k_head;
            for (int64_t p = 0; p < key_panels; ++p) {
                float * dst = kt + p * a.hd * NR;
                for (int64_t j = 0; j < NR; ++j) {
                    const int64_t key = p * NR + j;
                    const float * src = kb + key * a.k_tok;
                    for (int64_t d = 0; d < a.hd; ++d) dst[d * NR + j] = key < a.Nk ? src[d] : 0.0f;
                }
            }
            // v as panels of NR head dims, [Nk][NR] each (zero-padded past hd): contiguous rows for the
            // p v product instead of rows a token stride apart (a page each for long sequences).
            const float * vsrc = a.v + b * a.v_item + h * a.v_head;
            for (int64_t p = 0; p < d_panels; ++p) {
                const __mmask16 m0 = lanes(a.hd - p * NR), m1 = lanes(a.hd - p * NR - 16);
                float * dst = vp + p * a.Nk * NR;
                for (int64_t key = 0; key < a.Nk; ++key) {
                    const float * src = vsrc + key * a.v_tok + p * NR;
                    _mm512_storeu_ps(dst + key * NR, _mm512_maskz_loadu_ps(m0, src));
                    _mm512_storeu_ps(dst + key * NR + 16, _mm512_maskz_loadu_ps(m1, src + 16));
                }
            }
            packed_b = b;
            packed_h = h;
        }
        // Scores [rows][Nk] = q k^T.
        const float * qb = a.q + b * a.q_item + q0 * a.q_tok + h * a.q_head;
        for (int64_t p = 0; p < key_panels; ++p) {
            const int64_t width = std::min(NR, a.Nk - p * NR);
            const __mmask16 m0 = lanes(width), m1 = lanes(width - 16);
            for (int64_t k0 = 0; k0 < a.hd; k0 += KC) {
                const int64_t kc = std::min(KC, a.hd - k0);
                for (int64_t r = 0; r < rows; r += MR) {
                    kernel(std::min(MR, rows - r))(qb + r * a.q_tok + k0, a.q_tok, kt + p * a.hd * NR + k0 * NR, kc,
                                                   sc + r * lds + p * NR, lds, m0, m1, k0 > 0, nullptr, nullptr);
                }
            }
        }
        for (int64_t i = 0; i < rows; ++i) {
            softmax_row(sc + i * lds, a.Nk, a.scale, a.mask_row(q0 + i), a.mask_f16);
        }
        // out [rows][hd] = p v.
        float * ob = a.out + b * a.o_item + q0 * a.o_tok + h * a.hd;
        for (int64_t p = 0; p * NR < a.hd; ++p) {
            const int64_t width = std::min(NR, a.hd - p * NR);
            const __mmask16 m0 = lanes(width), m1 = lanes(width - 16);
            for (int64_t k0 = 0; k0 < a.Nk; k0 += KC) {
                const int64_t kc = std::min(KC, a.Nk - k0);
                for (int64_t r = 0; r < rows; r += MR) {
                    kernel(std::min(MR, rows - r))(sc + r * lds + k0, lds, vp + p * a.Nk * NR + k0 * NR, kc,
                                                   ob + r * a.o_tok + p * NR, a.o_tok, m0, m1, k0 > 0, nullptr, nullptr);
                }
            }
        }
    }
}

void layer_norm_rows(const float * x, int64_t ldx, float * y, uint16_t * y16, int64_t ldy, int64_t n, int64_t r0,
                     int64_t r1, const float * w, const float * b, float eps) {
    // bf16 out (for a bf16 product): each row in f32 first, then rounded as that product's own
    // conversion rounds (gemm_bf16.cpp), so the bits are the same either way.
    float * row = y16 ? scratch<float>(Slot::Stage, size_t(n)) : nullptr;
    if (y16 && !row) return;  // counted: the context reports it
    for (int64_t r = r0; r < r1; ++r) {
        const float * xr = x + r * ldx;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; j += 16) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(lanes(n - j), xr + j));
        const float mean = _mm512_reduce_add_ps(acc) / float(n);
        const __m512 vm = _mm512_set1_ps(mean);
        acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; j += 16) {
            const __mmask16 m = lanes(n - j);
            const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, xr + j), vm);
            acc = _mm512_fmadd_ps(d, d, acc);
        }
        const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(_mm512_reduce_add_ps(acc) / float(n) + eps));
        for (int64_t j = 0; j < n; j += 16) {
            const __mmask16 m = lanes(n - j);
            __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, xr + j), vm), inv);
            if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + j));
            if (b) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, b + j));
            _mm512_mask_storeu_ps((y16 ? row : y + r * ldy) + j, m, v);
        }
        if (y16) to_bf16_row(row, n, y16 + r * ldy);
    }
}

void gelu_erf_avx512(const float * x, float * y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu_erf_ps(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = lanes(n - i);
        _mm512_mask_storeu_ps(y + i, m, gelu_erf_ps(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

}  // namespace jepa::gemm::detail
