// The native suites' graph harness: one ggml graph on the CPU backend, as the engine runs its own.
#pragma once

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <vector>

// One graph with n threads: `build` adds the op under test to a no-alloc context and returns it, `set`
// fills the inputs once allocated; the result comes back as f32 (bf16 widened), its type in out_type.
template <typename Build, typename Set>
std::vector<float> run_graph(int threads, Build && build, Set && set, ggml_type * out_type = nullptr) {
    ggml_init_params ip{1024 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};  // room for fallbacks built of views
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * y = build(ctx);
    ggml_set_output(y);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, threads);
    ggml_gallocr_t ga = ggml_gallocr_new(ggml_backend_get_default_buffer_type(be));
    ggml_gallocr_alloc_graph(ga, gf);
    set();
    ggml_backend_graph_compute(be, gf);
    std::vector<float> out(size_t(ggml_nelements(y)));
    if (y->type == GGML_TYPE_BF16) {
        std::vector<ggml_bf16_t> h(out.size());
        ggml_backend_tensor_get(y, h.data(), 0, h.size() * 2);
        for (size_t i = 0; i < h.size(); ++i) out[i] = ggml_bf16_to_fp32(h[i]);
    } else {
        ggml_backend_tensor_get(y, out.data(), 0, out.size() * 4);
    }
    if (out_type) *out_type = y->type;
    ggml_gallocr_free(ga);
    ggml_backend_free(be);
    ggml_free(ctx);
    return out;
}
