// The q8_0 product's block dots on AMX-INT8 tiles (kernels_q8.inc with JEPA_Q8_TILES): 16 rows x 16
// columns of one panel per k block of 32, one TDPBSUD each (activations signed, weights stored as
// w + 128 unsigned, the VNNI path's form), so a block's dot is the same exact int32 sum the VNNI
// path forms, and the f32 steps after it (the start offset, the conversion, scale times x's scale,
// one FMA per block in k order) are the VNNI path's own operations on the same values: the same
// bits. Rows that do not fill a tile run the VNNI micro-kernel. Included only by gemm_q8_amx.cpp
// (AVX-512 + VNNI + AMX flags), after simd_avx512.h and simd_q8_vnni.h; run only where CPUID has
// AMX-INT8 and the kernel granted the tile state (gemm.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace jepa::gemm::detail::avx512::amx {

constexpr int kQTile = 16;  // rows (and columns: one panel) of a tile

// The tile shapes of this kernel, loaded per thread for one product and released after it:
// tmm0 / tmm1 int32 sums 16 x 16, tmm2 / tmm3 activations 16 rows x 32 bytes, tmm4 / tmm5 weights
// 8 rows (4-k groups) x 64 bytes (16 columns x 4 k). Two of each, so one block's product can run while
// the previous block's sums are read back.
class QTiles {
public:
    QTiles() {
        struct alignas(64) {
            uint8_t palette = 1, start_row = 0, reserved[14] = {};
            uint16_t colsb[16] = {64, 64, 32, 32, 64, 64};
            uint8_t rows[16] = {16, 16, 16, 16, 8, 8};
        } cfg;
        _tile_loadconfig(&cfg);
    }
    ~QTiles() { _tile_release(); }
    QTiles(const QTiles &) = delete;
    QTiles & operator=(const QTiles &) = delete;
};

// Tile numbers are immediates, hence the parity as a template argument: block b's sums live in tmm
// (b & 1), its activations in tmm 2 + (b & 1), its weights in tmm 4 + (b & 1).
// (GCC's tile intrinsics are macros that paste the number into the instruction: literals only.)
template <int P>
inline void qtile_dot(const int8_t * qa, int64_t K, const uint8_t * wq, int64_t b) {
    constexpr int64_t kBlockBytes = 8 * 16 * 4;
    if constexpr (P == 0) {
        _tile_zero(0);
        _tile_loadd(2, qa + b * 32, K);
        _tile_loadd(4, wq + b * kBlockBytes, 64);
        _tile_dpbsud(0, 2, 4);
    } else {
        _tile_zero(1);
        _tile_loadd(3, qa + b * 32, K);
        _tile_loadd(5, wq + b * kBlockBytes, 64);
        _tile_dpbsud(1, 3, 5);
    }
}
template <int P>
inline void qtile_store(int32_t * sums) {
    if constexpr (P == 0) {
        _tile_stored(0, sums, 64);
    } else {
        _tile_stored(1, sums, 64);
    }
}

// 16 rows x 16 columns of the product over every k block, into c: x's rows qa (stride K), their scales
// da and start offsets ia (stride nb); the panel's f16 scales ws [nb][16] and weights wq [nb][8][16][4].
// Pipelined two blocks deep, so neither the tile product's latency nor its store's is waited on: while
// block b's sums are read from memory, block b + 1's are stored and block b + 2's product runs.
inline void qtile(const int8_t * qa, int64_t K, const float * da, const int32_t * ia, const uint16_t * ws,
                  const uint8_t * wq, V * c) {
    const int64_t nb = K / 32;
    alignas(64) int32_t sums[2][256];
    for (int i = 0; i < kQTile; ++i) c[i] = zero();
    qtile_dot<0>(qa, K, wq, 0);
    if (nb > 1) qtile_dot<1>(qa, K, wq, 1);
    qtile_store<0>(sums[0]);
    for (int64_t b = 0; b < nb; ++b) {
        if (b & 1) {
            if (b + 2 < nb) qtile_dot<1>(qa, K, wq, b + 2);
            if (b + 1 < nb) qtile_store<0>(sums[0]);
        } else {
            if (b + 2 < nb) qtile_dot<0>(qa, K, wq, b + 2);
            if (b + 1 < nb) qtile_store<1>(sums[1]);
        }
        const int32_t * s32 = sums[b & 1];
        const V s = load_f16_n(ws + b * 16, 16);
#pragma GCC unroll 16
        for (int i = 0; i < kQTile; ++i) {
            const __m512i sum = _mm512_add_epi32(_mm512_load_si512(s32 + 16 * i), _mm512_set1_epi32(ia[i * nb + b]));
            c[i] = fmadd(V{_mm512_cvtepi32_ps(sum)}, mul(s, set1(da[i * nb + b])), c[i]);
        }
    }
}

}  // namespace jepa::gemm::detail::avx512::amx
