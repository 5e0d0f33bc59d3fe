// The kernel suites' fixtures (test_gemm.cpp, test_adaln.cpp): a weight packed as the loader packs
// it, random inputs, a bit-pattern comparison, and the f32 kernel set of every ISA this CPU runs.
#pragma once

#include "jepa.h"
#include "cpu/paths.h"
#include "cpu/gemm.h"
#include "cpu/gemm_kernels.h"

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace kd = jepa::gemm::detail;

inline uint16_t to_half_bits(float f, ggml_type t) {
    if (t == GGML_TYPE_F16) return ggml_fp32_to_fp16(f);
    return ggml_fp32_to_bf16(f).bits;
}

inline float from_half_bits(uint16_t h, ggml_type t) {
    if (t == GGML_TYPE_F16) return ggml_fp16_to_fp32(h);
    ggml_bf16_t b;
    b.bits = h;
    return ggml_bf16_to_fp32(b);
}

// One weight matrix packed for the kernel, in 64-byte aligned memory as the loader places it.
struct Weight {
    ggml_type type;
    int64_t K, N;
    std::vector<float> value;  // [N][K], the weight as the kernel sees it (after rounding to type)
    std::vector<uint8_t> raw;  // q8_0: ggml's blocks as the file holds them, before packing; i8c: the int8 rows
    ggml_context * ctx = nullptr;
    ggml_tensor * w = nullptr;
    ggml_tensor * b = nullptr;
    ggml_tensor * s = nullptr;  // i8c (type I8): the scale of each output column
    void * mem = nullptr;
    ggml_backend_buffer_t buf = nullptr;

    Weight(ggml_type type_, int64_t K_, int64_t N_, bool bias, uint32_t seed) : type(type_), K(K_), N(N_) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(float(K)));
        ggml_init_params ip{3 * ggml_tensor_overhead(), nullptr, true};
        ctx = ggml_init(ip);
        w = ggml_new_tensor_2d(ctx, type, K, N);
        b = bias ? ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N) : nullptr;
        s = type == GGML_TYPE_I8 ? ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N) : nullptr;
        // aligned_alloc needs a size that is a multiple of the alignment (ASan holds us to it).
        auto up = [](const ggml_tensor * t) { return t ? (ggml_nbytes(t) + 63) / 64 * 64 : 0; };
        const size_t wb = up(w), bb = up(b), sb = up(s);
        mem = std::aligned_alloc(64, wb + bb + sb + 64);
        buf = ggml_backend_cpu_buffer_from_ptr(mem, wb + bb + sb + 64);
        ggml_backend_tensor_alloc(buf, w, mem);
        if (b) ggml_backend_tensor_alloc(buf, b, static_cast<char *>(mem) + wb);
        if (s) ggml_backend_tensor_alloc(buf, s, static_cast<char *>(mem) + wb + bb);
        value.resize(size_t(N * K));
        if (type == GGML_TYPE_I8) {
            // The engine's own i8c writer (jepa_quantize), as jepa-quantize writes the file.
            std::vector<float> f(size_t(N * K));
            for (float & v : f) v = nd(rng);
            std::vector<uint8_t> rows(size_t(N * (K + 4)));
            jepa_quantize("i8c", f.data(), N, K, rows.data(), rows.size());
            raw.resize(size_t(N * K));
            for (int64_t n = 0; n < N; ++n) {
                float d;
                std::memcpy(&d, rows.data() + n * (K + 4) + K, 4);
                static_cast<float *>(s->data)[n] = d;
                std::memcpy(raw.data() + n * K, rows.data() + n * (K + 4), size_t(K));
                for (int64_t k = 0; k < K; ++k) value[size_t(n * K + k)] = float(int8_t(raw[size_t(n * K + k)])) * d;
            }
            std::memcpy(w->data, raw.data(), raw.size());
        }
        if (type == GGML_TYPE_Q8_0) {
            // ggml's own quantizer, as jepa-quantize writes the file; value is what the blocks hold.
            std::vector<float> f(size_t(N * K));
            for (float & v : f) v = nd(rng);
            ggml_quantize_chunk(type, f.data(), w->data, 0, N, K, nullptr);
            raw.assign(static_cast<const uint8_t *>(w->data), static_cast<const uint8_t *>(w->data) + ggml_nbytes(w));
            ggml_get_type_traits(type)->to_float(w->data, value.data(), N * K);
        }
        for (int64_t i = 0; i < N * K && type != GGML_TYPE_Q8_0 && type != GGML_TYPE_I8; ++i) {
            const float f = nd(rng);
            if (type == GGML_TYPE_F32) {
                static_cast<float *>(w->data)[i] = f;
                value[size_t(i)] = f;
            } else {
                const uint16_t h = to_half_bits(f, type);
                static_cast<uint16_t *>(w->data)[i] = h;
                value[size_t(i)] = from_half_bits(h, type);
            }
        }
        if (b) {
            for (int64_t i = 0; i < N; ++i) static_cast<float *>(b->data)[i] = nd(rng);
        }
        if (jepa::gemm::can_pack(w)) jepa::gemm::pack_in_place(w);
    }
    ~Weight() {
        ggml_backend_buffer_free(buf);
        std::free(mem);
        ggml_free(ctx);
    }
};

inline std::vector<float> random_x(int64_t M, int64_t K, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(M * K));
    for (float & v : x) v = nd(rng);
    return x;
}

inline bool same_bits(const float * a, const float * b, size_t n) { return std::memcmp(a, b, n * 4) == 0; }

// "" when y has want's bits, else where they first differ (" (first at i: bits, want bits)"). Any NaN
// equals any NaN: its sign and payload are the hardware's (x86 makes 0xffc00000, ARM 0x7fc00000).
inline std::string first_difference(const std::vector<float> & y, const std::vector<float> & want) {
    for (size_t i = 0; i < y.size(); ++i) {
        uint32_t u, v;
        std::memcpy(&u, &y[i], 4);
        std::memcpy(&v, &want[i], 4);
        if (u != v && !(std::isnan(y[i]) && std::isnan(want[i]))) {
            char buf[96];
            std::snprintf(buf, sizeof buf, " (first at %zu: %08x, want %08x)", i, u, v);
            return buf;
        }
    }
    return "";
}

// The f32 kernel sets this CPU can run, whatever JEPA_GEMM says (the portable one always).
inline std::vector<std::pair<const char *, const kd::KernelSet *>> isa_kernels() {
    std::vector<std::pair<const char *, const kd::KernelSet *>> v;
#ifndef JEPA_NO_X86_KERNELS
    if (jepa::cpu::can_run(jepa::cpu::F32::Avx512)) v.push_back({"avx512", &kd::avx512::kernels});
    if (jepa::cpu::can_run(jepa::cpu::F32::Avx2)) v.push_back({"avx2", &kd::avx2::kernels});
#endif
#if defined(__aarch64__) || defined(_M_ARM64)
    if (jepa::cpu::can_run(jepa::cpu::F32::Neon)) v.push_back({"neon", &kd::neon::kernels});
#endif
    v.push_back({"portable", &kd::portable::kernels});
    return v;
}

// Runs `f(kernels, ith, nth)` for every thread of an nth-way split, one after another.
template <typename F> void each_thread(int nth, F && f) {
    for (int ith = 0; ith < nth; ++ith) f(ith, nth);
}
