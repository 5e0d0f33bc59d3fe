// The bf16 kernels: AMX tiles where the CPU and the OS allow them, else AVX512-BF16 (VDPBF16PS).
// Activations are rounded to bf16 (nearest even) block by block; products accumulate in f32.
// Weights are packed in k pairs, [K/2][16][2] per 16-column panel: one AMX B tile row, one zmm.
#include "erf_avx512.h"
#include "gemm_kernels.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace jepa::gemm::detail {

bool amx_request_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
}

namespace {

constexpr int64_t TM = 16;        // rows of an AMX tile
constexpr int64_t TK = 32;        // k per tile step (16 pairs)
constexpr int64_t MCB = 128;      // rows per block of converted activations
constexpr int64_t KCB = 512;      // k per block (a multiple of TK)

struct FreeDeleter {
    void operator()(void * p) const { std::free(p); }
};

template <typename T>
T * scratch(size_t bytes, int slot) {
    thread_local std::unique_ptr<void, FreeDeleter> bufs[4];
    thread_local size_t sizes[4] = {0, 0, 0, 0};
    if (sizes[slot] < bytes) {
        bufs[slot].reset(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
        sizes[slot] = bytes;
    }
    return static_cast<T *>(bufs[slot].get());
}

inline __mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n > 0 ? n : 0)) - 1); }

// Rows [m0, m0 + mc) x k [k0, k0 + kc) of x as bf16, [mc rounded up to 32][kcp] (kcp = kc rounded up to
// 32), zero-padded, so every tile load reads defined values.
uint16_t * convert_rows(const Problem & p, int64_t m0, int64_t mc, int64_t k0, int64_t kc, int64_t kcp) {
    const int64_t rows = (mc + 31) / 32 * 32;
    uint16_t * a = scratch<uint16_t>(size_t(rows * kcp) * 2, 0);
    for (int64_t r = 0; r < rows; ++r) {
        uint16_t * dst = a + r * kcp;
        if (r >= mc) {
            std::memset(dst, 0, size_t(kcp) * 2);
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
const uint16_t * weight_panel(const Problem & p, int64_t pi, int64_t k0, int64_t kc, int64_t kcp, int slot) {
    const int64_t width = std::min(NR16, p.N - pi * NR16);
    const uint16_t * src = static_cast<const uint16_t *>(p.w) + pi * NR16 * p.K + k0 * width;
    if (width == NR16 && kc == kcp) return src;
    uint16_t * dst = scratch<uint16_t>(size_t(kcp * NR16) * 2, slot);
    std::memset(dst, 0, size_t(kcp * NR16) * 2);
    for (int64_t kp = 0; kp < kc / 2; ++kp) std::memcpy(dst + kp * 2 * NR16, src + kp * 2 * width, size_t(width) * 4);
    return dst;
}

// Bias and activation on a finished block of y, then the store of the rows and columns that exist.
void finish(const Problem & p, const float * c, int64_t ldc, int64_t rows, int64_t n0, int64_t cols, float * y) {
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; j += 16) {
            const __mmask16 m = lanes(cols - j);
            __m512 v = _mm512_maskz_loadu_ps(m, c + i * ldc + j);
            if (p.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, p.bias + n0 + j));
            if (p.epilogue == Epilogue::GeluErf) v = gelu_erf_ps(v);
            _mm512_mask_storeu_ps(y + i * p.ldy + j, m, v);
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
// kcp) against the weight panels b0, b1; c holds the block (row stride ldc).
void amx_block(const uint16_t * a, int64_t kcp, const uint16_t * b0, const uint16_t * b1, float * c, int64_t ldc,
               bool carry) {
    const size_t lda = size_t(kcp) * 2, ldcb = size_t(ldc) * 4;
    if (carry) {
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
        _tile_loadd(4, a + k, lda);
        _tile_loadd(5, a + TM * kcp + k, lda);
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
void dp_block(const uint16_t * a, int64_t kcp, const uint16_t * b0, const uint16_t * b1, float * c, int64_t ldc,
              bool carry) {
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
            std::memcpy(&pair, a + i * kcp + 2 * kp, 4);
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
    const Share s = share_of(p.M, n_pairs, 32, ith, nth);
    if (s.p0 >= s.p1 || s.m0 >= s.m1) return;
    if (amx) amx_configure();
    // The block being accumulated: 32 x 32 f32, staged when it is not a whole block of y.
    float * stage = scratch<float>(32 * 32 * 4, 1);
    for (int64_t m0 = s.m0; m0 < s.m1; m0 += MCB) {
        const int64_t mc = std::min(MCB, s.m1 - m0);
        for (int64_t k0 = 0; k0 < p.K; k0 += KCB) {
            const int64_t kc = std::min(KCB, p.K - k0), kcp = (kc + TK - 1) / TK * TK;
            const bool carry = k0 > 0, last = k0 + kc == p.K;
            const uint16_t * a = convert_rows(p, m0, mc, k0, kc, kcp);
            for (int64_t q = s.p0; q < s.p1; ++q) {
                const int64_t n0 = q * 2 * NR16, cols = std::min<int64_t>(32, p.N - n0);
                const uint16_t * b0 = weight_panel(p, 2 * q, k0, kc, kcp, 2);
                // A lone last panel pairs with itself; the block's second half of columns is dropped.
                const uint16_t * b1 = 2 * q + 1 < n_panels ? weight_panel(p, 2 * q + 1, k0, kc, kcp, 3) : b0;
                for (int64_t r = 0; r < mc; r += 32) {
                    const int64_t rows = std::min<int64_t>(32, mc - r);
                    float * y = p.y + (m0 + r) * p.ldy + n0;
                    const bool whole = rows == 32 && cols == 32;
                    float * c = whole ? y : stage;
                    const int64_t ldc = whole ? p.ldy : 32;
                    if (!whole) {
                        std::memset(stage, 0, 32 * 32 * 4);
                        if (carry) {
                            for (int64_t i = 0; i < rows; ++i) std::memcpy(stage + i * 32, y + i * p.ldy, size_t(cols) * 4);
                        }
                    }
                    if (amx) {
                        amx_block(a + r * kcp, kcp, b0, b1, c, ldc, carry);
                    } else {
                        for (int64_t i = 0; i < 32; i += 8) dp_block<8>(a + (r + i) * kcp, kcp, b0, b1, c + i * ldc, ldc, carry);
                    }
                    if (last) {
                        finish(p, c, ldc, rows, n0, cols, y);
                    } else if (!whole) {
                        for (int64_t i = 0; i < rows; ++i) std::memcpy(y + i * p.ldy, stage + i * 32, size_t(cols) * 4);
                    }
                }
            }
        }
    }
    if (amx) _tile_release();
}

}  // namespace jepa::gemm::detail
