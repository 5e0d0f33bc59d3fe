// The i8c product's sums on AMX-INT8 tiles (kernels_i8.inc with JEPA_Q8_TILES): up to 32 rows x 32
// columns (two panels) at once, four int32 tiles that take TDPBSUD over the whole of k before they
// are stored (activations signed, weights stored as w + 128 unsigned, the VNNI path's form), so a
// sum is the same exact int32 the VNNI path forms and the f32 steps after it (the start offset, the
// one conversion, scale times x's scale) are the VNNI path's own operations on the same values: the
// same bits. k runs in steps of 64 (K % 64 == 0; other products run the VNNI micro-kernel). Included
// only by gemm_q8_amx.cpp, after simd_avx512.h and simd_q8_vnni.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace jepa::gemm::detail::avx512::amx {

constexpr int kITile = 16;    // rows and columns of a tile
constexpr int64_t kITileK = 64;  // k per tile product (64 bytes of a row)

// tmm0..3 the int32 sums of (row tile r, panel c) at 2 r + c, 16 x 16; tmm4 / tmm5 two row tiles of
// activations, 16 rows x 64 bytes; tmm6 / tmm7 two panels' weights, 16 quads x 64 bytes (16 columns
// x 4 k). Loaded per thread for one product and released after it.
class ITiles {
public:
    ITiles() {
        struct alignas(64) {
            uint8_t palette = 1, start_row = 0, reserved[14] = {};
            uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
            uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
        } cfg;
        _tile_loadconfig(&cfg);
    }
    ~ITiles() { _tile_release(); }
    ITiles(const ITiles &) = delete;
    ITiles & operator=(const ITiles &) = delete;
};

// RT row tiles (qa: 16 rows each in the tiled form [K/64][16][64], the next tile's K * 16 bytes on) times CT panels (wq0, wq1: [K/4][16][4]) over the
// whole of k, stored into sums[RT * CT][256] (row tile r, panel c at r * CT + c), row-major 16 x 16.
// (GCC's tile intrinsics paste the tile number into the instruction: literals only, hence the spelling.)
template <int RT, int CT>
inline void itile(const int8_t * qa, int64_t K, const uint8_t * wq0, const uint8_t * wq1, int32_t (*sums)[256]) {
    _tile_zero(0);
    if constexpr (CT == 2) _tile_zero(1);
    if constexpr (RT == 2) _tile_zero(2);
    if constexpr (RT == 2 && CT == 2) _tile_zero(3);
    for (int64_t k0 = 0; k0 < K; k0 += kITileK) {
        _tile_loadd(4, qa + k0 * 16, 64);
        _tile_loadd(6, wq0 + k0 * 16, 64);  // quads k0 / 4 on, 64 bytes each
        if constexpr (CT == 2) _tile_loadd(7, wq1 + k0 * 16, 64);
        if constexpr (RT == 2) _tile_loadd(5, qa + 16 * K + k0 * 16, 64);
        _tile_dpbsud(0, 4, 6);
        if constexpr (CT == 2) _tile_dpbsud(1, 4, 7);
        if constexpr (RT == 2) _tile_dpbsud(2, 5, 6);
        if constexpr (RT == 2 && CT == 2) _tile_dpbsud(3, 5, 7);
    }
    if constexpr (CT == 2) {
        _tile_stored(0, sums[0], 64);
        _tile_stored(1, sums[1], 64);
        if constexpr (RT == 2) {
            _tile_stored(2, sums[2], 64);
            _tile_stored(3, sums[3], 64);
        }
    } else {
        _tile_stored(0, sums[0], 64);
        if constexpr (RT == 2) _tile_stored(2, sums[1], 64);
    }
}

// One tile's sums as f32 rows: float(sum + start) * (w_scale * x_scale), the micro-kernel's operations.
inline void itile_scale(const int32_t * sums, const int32_t * ia, const float * da, const float * ws, V * c) {
    const V s = load(ws);
#pragma GCC unroll 16
    for (int i = 0; i < kITile; ++i) {
        const __m512i sum = _mm512_add_epi32(_mm512_load_si512(sums + 16 * i), _mm512_set1_epi32(ia[i]));
        c[i] = mul(V{_mm512_cvtepi32_ps(sum)}, mul(s, set1(da[i])));
    }
}

}  // namespace jepa::gemm::detail::avx512::amx
