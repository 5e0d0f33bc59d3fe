// Weights into the kernels' layouts, once at load and in place (gemm_kernels.h names the layouts).
#include "dispatch.h"

#include <cstring>
#include <vector>

namespace jepa::gemm {

using namespace detail;

namespace {


template <typename T>
void pack_panels(T * data, int64_t N, int64_t K) {
    // [N][K] -> panels of NR columns, [K][width] each (width NR but for the last).
    std::vector<T> src(data, data + N * K);
    for (int64_t n0 = 0; n0 < N; n0 += NR) {
        const int64_t width = std::min(NR, N - n0);
        T * dst = data + n0 * K;
        for (int64_t k = 0; k < K; ++k) {
            for (int64_t j = 0; j < width; ++j) dst[k * width + j] = src[size_t((n0 + j) * K + k)];
        }
    }
}

// ggml's q8_0 rows ([N][K / 32] blocks of an f16 scale and 32 int8) -> panels of NRQ columns, each
// [K/32][width] f16 scales then [K/32][8][width][4] weights as w + 128 (gemm_kernels.h). A weight of
// -128, which ggml's quantizer never writes (it rounds to [-127, 127]), is read as -127: AVX2's
// product forms |a| times w with a's sign, where -128 has no negation.
void pack_q8(uint8_t * data, int64_t N, int64_t K) {
    constexpr int64_t kBlock = 34;  // ggml's block_q8_0: f16 d, int8 qs[32]
    const int64_t nb = K / 32;
    std::vector<uint8_t> src(data, data + N * nb * kBlock);
    for (int64_t n0 = 0; n0 < N; n0 += NRQ) {
        const int64_t width = std::min(NRQ, N - n0);
        uint8_t * scales = data + n0 * nb * kBlock;
        uint8_t * q = scales + nb * width * 2;
        for (int64_t j = 0; j < width; ++j) {
            const uint8_t * row = src.data() + (n0 + j) * nb * kBlock;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t * blk = row + b * kBlock;
                std::memcpy(scales + (b * width + j) * 2, blk, 2);
                for (int64_t k = 0; k < 32; ++k) {
                    const int v = std::max(-127, int(int8_t(blk[2 + k])));
                    q[((b * 8 + k / 4) * width + j) * 4 + k % 4] = uint8_t(v + 128);
                }
            }
        }
    }
}

// i8c rows ([N][K] int8) -> panels of NRQ columns, each [K/4][width][4] as w + 128 (gemm_kernels.h).
// A weight of -128 (jepa-quantize never writes one) is read as -127, as pack_q8 reads it.
void pack_i8(uint8_t * data, int64_t N, int64_t K) {
    std::vector<uint8_t> src(data, data + N * K);
    for (int64_t n0 = 0; n0 < N; n0 += NRQ) {
        const int64_t width = std::min(NRQ, N - n0);
        uint8_t * q = data + n0 * K;
        for (int64_t j = 0; j < width; ++j) {
            const uint8_t * row = src.data() + (n0 + j) * K;
            for (int64_t k = 0; k < K; ++k) {
                q[((k / 4) * width + j) * 4 + k % 4] = uint8_t(std::max(-127, int(int8_t(row[k]))) + 128);
            }
        }
    }
}

void pack_pairs(uint16_t * data, int64_t N, int64_t K) {
    // [N][K] -> panels of NR16 columns, [K/2][width][2] each.
    std::vector<uint16_t> src(data, data + N * K);
    for (int64_t n0 = 0; n0 < N; n0 += NR16) {
        const int64_t width = std::min(NR16, N - n0);
        uint16_t * dst = data + n0 * K;
        for (int64_t kp = 0; kp < K / 2; ++kp) {
            for (int64_t j = 0; j < width; ++j) {
                dst[(kp * width + j) * 2 + 0] = src[size_t((n0 + j) * K + 2 * kp)];
                dst[(kp * width + j) * 2 + 1] = src[size_t((n0 + j) * K + 2 * kp + 1)];
            }
        }
    }
}

}  // namespace

bool packable(const ggml_tensor * w) {
    // i8c has no product in ggml: it runs the engine's own (portable where the path has no ISA of its
    // own), on every path, with the same bits; every other type follows the path.
    if (!own_f32() && layout_of(w) != Layout::I8) return false;
    if (ggml_n_dims(w) > 2 || !ggml_is_contiguous(w)) return false;
    if (layout_of(w) == Layout::None) return false;
    if (layout_of(w) == Layout::Bf16Pairs && w->ne[0] % 2 != 0) return false;
    if (layout_of(w) == Layout::Q8 && w->ne[0] % 32 != 0) return false;
    if (layout_of(w) == Layout::I8 && (w->ne[0] % I8_K_STEP != 0 || w->ne[0] > I8_K_MAX)) return false;
    return w->ne[0] >= 1 && w->ne[1] >= 1;
}

bool can_pack(const ggml_tensor * w) {
    return packable(w) && w->data && (reinterpret_cast<uintptr_t>(w->data) & 63) == 0;
}

void pack_in_place(ggml_tensor * w) {
    const int64_t K = w->ne[0], N = w->ne[1];
    switch (layout_of(w)) {
        case Layout::F32: pack_panels(static_cast<float *>(w->data), N, K); break;
        case Layout::F16:
        case Layout::Bf16Wide: pack_panels(static_cast<uint16_t *>(w->data), N, K); break;
        case Layout::Bf16Pairs: pack_pairs(static_cast<uint16_t *>(w->data), N, K); break;
        case Layout::Q8: pack_q8(static_cast<uint8_t *>(w->data), N, K); break;
        case Layout::I8: pack_i8(static_cast<uint8_t *>(w->data), N, K); break;
        case Layout::None: break;
    }
}

bool takes_bf16(const ggml_tensor * w) { return layout_of(w) == Layout::Bf16Pairs; }

}  // namespace jepa::gemm
