#include "py_common.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace jepa_py {

struct PyModel;  // defined in py_model.cpp; we only need its handle
std::shared_ptr<jepa_model> model_handle(const py::object & model);

struct PyContext {
    std::shared_ptr<jepa_model> model;  // keeps the model alive as long as the context
    std::unique_ptr<jepa_context, void (*)(jepa_context *)> handle{nullptr, jepa_context_free};
    int64_t embed_dim = 0;
    int64_t n_classes = 0;
    int in_chans = 3;

    PyContext(const py::object & py_model, int n_threads, int max_batch, int flash_attn, int64_t max_graph_bytes) {
        model = model_handle(py_model);
        jepa_context_params p = jepa_context_default_params();
        p.n_threads = n_threads;
        p.max_batch = max_batch;
        p.flash_attn = flash_attn;
        p.max_graph_bytes = max_graph_bytes;
        jepa_context * c = jepa_context_new(model.get(), &p);
        if (!c) raise_status(jepa_error_status(), "cannot create a context");
        handle.reset(c);
        jepa_model_info i;
        check(jepa_model_get_info(model.get(), &i));
        embed_dim = i.embed_dim;
        n_classes = i.n_classes;
        in_chans = i.in_chans;
    }

    jepa_context_params params() const {
        jepa_context_params p;
        check(jepa_context_get_params(handle.get(), &p));
        return p;
    }

    py::array_t<float> encode(const py::array_t<float, py::array::c_style> & x) {
        require_shape(x.ndim() == 5, "encode expects a 5-D float32 array [B, C, T, H, W]");
        check_dims(x, "encode");
        const int B = int(x.shape(0)), C = int(x.shape(1)), T = int(x.shape(2)), H = int(x.shape(3)), W = int(x.shape(4));
        if (C != in_chans) {
            // Checked before the token count, so a channels-last array is named for what it is.
            jepa_error_clear();
            const std::string msg = "expected " + std::to_string(in_chans) + " channels, got " + std::to_string(C) +
                                    " (pixels are [B, C, T, H, W], channels first)";
            raise_status(JEPA_ERR_INVALID_ARG, msg.c_str());
        }
        const int64_t n_tok = jepa_model_n_tokens(model.get(), T, H, W);
        if (n_tok < 0) raise_status(jepa_error_status());
        py::array_t<float> out({int64_t(B), n_tok, embed_dim});
        const float * src = x.data();
        float * dst = out.mutable_data();
        const size_t out_len = size_t(out.size());
        run_nogil([&] { return jepa_encode(handle.get(), src, B, C, T, H, W, dst, out_len); });
        return out;
    }

    // tokens [B, N, D] -> (logits [B, n_classes], pooled [B, D])
    py::tuple classify(const py::array_t<float, py::array::c_style> & x) {
        require_shape(x.ndim() == 3, "classify expects a 3-D float32 array [B, N, D]");
        check_dims(x, "classify");
        const int B = int(x.shape(0)), N = int(x.shape(1)), D = int(x.shape(2));
        py::array_t<float> logits({int64_t(B), std::max<int64_t>(n_classes, 1)});
        py::array_t<float> pooled({int64_t(B), embed_dim});
        const float * src = x.data();
        float * lp = logits.mutable_data();
        float * pp = pooled.mutable_data();
        const size_t ll = size_t(logits.size()), pl = size_t(pooled.size());
        run_nogil([&] { return jepa_classify(handle.get(), src, B, N, D, lp, ll, pp, pl); });
        return py::make_tuple(logits, pooled);
    }

    // context tokens [B, Nc, D], ids [B, Nc] and [B, Nt] -> [B, Nt, D]
    py::array_t<float> predict(const py::array_t<float, py::array::c_style> & x,
                               const py::array_t<int32_t, py::array::c_style> & ctx_ids,
                               const py::array_t<int32_t, py::array::c_style> & tgt_ids, int mask_index, int grid_h,
                               int grid_w) {
        require_shape(x.ndim() == 3 && ctx_ids.ndim() == 2 && tgt_ids.ndim() == 2,
                      "predict expects tokens [B, Nc, D] and int32 ids [B, Nc], [B, Nt]");
        check_dims(x, "predict");
        check_dims(tgt_ids, "predict");
        const int B = int(x.shape(0)), Nc = int(x.shape(1)), D = int(x.shape(2)), Nt = int(tgt_ids.shape(1));
        if (ctx_ids.shape(0) != B || ctx_ids.shape(1) != Nc || tgt_ids.shape(0) != B) {
            jepa_error_clear();
            raise_status(JEPA_ERR_INVALID_ARG, "predict: the id arrays must be [B, Nc] and [B, Nt] for tokens [B, Nc, D]");
        }
        py::array_t<float> out({int64_t(B), int64_t(Nt), embed_dim});
        jepa_predict_params p = jepa_predict_default_params();
        p.mask_index = mask_index;
        p.grid_h = grid_h;
        p.grid_w = grid_w;
        const float * src = x.data();
        const int32_t * ci = ctx_ids.data();
        const int32_t * ti = tgt_ids.data();
        float * dst = out.mutable_data();
        const size_t out_len = size_t(out.size());
        run_nogil([&] { return jepa_predict(handle.get(), src, B, Nc, D, ci, ti, Nt, &p, dst, out_len); });
        return out;
    }

    // LeWM: frames [B, C, H, W] -> embeddings [B, D]
    py::array_t<float> lewm_embed(const py::array_t<float, py::array::c_style> & x) {
        require_shape(x.ndim() == 4, "lewm_embed expects a 4-D float32 array [B, C, H, W]");
        check_dims(x, "lewm_embed");
        const int B = int(x.shape(0)), C = int(x.shape(1)), H = int(x.shape(2)), W = int(x.shape(3));
        py::array_t<float> out({int64_t(B), wm_embed_dim()});
        const float * src = x.data();
        float * dst = out.mutable_data();
        const size_t len = size_t(out.size());
        run_nogil([&] { return jepa_lewm_embed(handle.get(), src, B, C, H, W, dst, len); });
        return out;
    }

    // LeWM: CLS rows [B, E] -> embeddings [B, D]
    py::array_t<float> lewm_project(const py::array_t<float, py::array::c_style> & x) {
        require_shape(x.ndim() == 2, "lewm_project expects a 2-D float32 array [B, E]");
        check_dims(x, "lewm_project");
        const int B = int(x.shape(0)), E = int(x.shape(1));
        py::array_t<float> out({int64_t(B), wm_embed_dim()});
        const float * src = x.data();
        float * dst = out.mutable_data();
        const size_t len = size_t(out.size());
        run_nogil([&] { return jepa_lewm_project(handle.get(), src, B, E, dst, len); });
        return out;
    }

    // LeWM: embeddings [B, T, D], actions [B, T, A] -> (pred, pred_raw, act_emb), each [B, T, D]
    py::tuple lewm_predict(const py::array_t<float, py::array::c_style> & e,
                           const py::array_t<float, py::array::c_style> & a) {
        require_shape(e.ndim() == 3 && a.ndim() == 3, "lewm_predict expects embeddings [B, T, D] and actions [B, T, A]");
        check_dims(e, "lewm_predict");
        check_dims(a, "lewm_predict");
        if (a.shape(0) != e.shape(0) || a.shape(1) != e.shape(1)) {
            jepa_error_clear();
            raise_status(JEPA_ERR_INVALID_ARG, "lewm_predict: actions must be [B, T, A] for embeddings [B, T, D]");
        }
        const int B = int(e.shape(0)), T = int(e.shape(1)), D = int(e.shape(2)), A = int(a.shape(2));
        std::vector<int64_t> shape = {int64_t(B), int64_t(T), int64_t(D)};
        py::array_t<float> out(shape), raw(shape), act(shape);
        const float * ep = e.data();
        const float * ap = a.data();
        float * op = out.mutable_data();
        float * rp = raw.mutable_data();
        float * cp = act.mutable_data();
        const size_t len = size_t(out.size());
        run_nogil([&] { return jepa_lewm_predict(handle.get(), ep, ap, B, T, D, A, op, len, rp, cp); });
        return py::make_tuple(out, raw, act);
    }

    // V-JEPA 2-AC: latents [B, T*HW, D], actions [B, T, 7], states [B, T, 7] -> [B, T*HW, D]
    py::array_t<float> ac_predict(const py::array_t<float, py::array::c_style> & z,
                                  const py::array_t<float, py::array::c_style> & a,
                                  const py::array_t<float, py::array::c_style> & s) {
        require_shape(z.ndim() == 3 && a.ndim() == 3 && s.ndim() == 3,
                      "ac_predict expects latents [B, T*HW, D], actions [B, T, 7] and states [B, T, 7]");
        check_dims(z, "ac_predict");
        check_dims(a, "ac_predict");
        check_dims(s, "ac_predict");
        jepa_model_info i;
        check(jepa_model_get_info(model.get(), &i));
        const int B = int(z.shape(0)), N = int(z.shape(1)), D = int(z.shape(2)), T = int(a.shape(1));
        if (a.shape(0) != B || s.shape(0) != B || s.shape(1) != T || a.shape(2) != i.pred_action_dim ||
            s.shape(2) != i.pred_state_dim || N % T != 0) {
            jepa_error_clear();
            const std::string msg = "ac_predict: expected latents [B, T*HW, D], actions [B, T, " +
                                    std::to_string(i.pred_action_dim) + "], states [B, T, " +
                                    std::to_string(i.pred_state_dim) + "] with the same B and T";
            raise_status(JEPA_ERR_INVALID_ARG, msg.c_str());
        }
        py::array_t<float> out({int64_t(B), int64_t(N), int64_t(D)});
        const float * zp = z.data();
        const float * ap = a.data();
        const float * sp = s.data();
        float * op = out.mutable_data();
        const size_t len = size_t(out.size());
        run_nogil([&] { return jepa_ac_predict(handle.get(), zp, ap, sp, B, T, N / T, D, op, len); });
        return out;
    }

    int64_t wm_embed_dim() const {
        jepa_model_info i;
        check(jepa_model_get_info(model.get(), &i));
        return std::max<int64_t>(i.wm_embed_dim, 1);
    }

    template <typename T>
    static void check_dims(const py::array_t<T, py::array::c_style> & x, const char * what) {
        for (int d = 0; d < x.ndim(); ++d) {
            if (x.shape(d) < 1 || x.shape(d) > INT32_MAX) {
                jepa_error_clear();
                raise_status(JEPA_ERR_INVALID_ARG, (std::string(what) + ": every dimension must be in [1, 2^31)").c_str());
            }
        }
    }
};

void register_context(py::module_ & m) {
    py::class_<PyContext>(m, "Context")
        .def(py::init<const py::object &, int, int, int, int64_t>(), py::arg("model"), py::arg("n_threads") = 0,
             py::arg("max_batch") = 32, py::arg("flash_attn") = -1, py::arg("max_graph_bytes") = 0)
        .def_property_readonly("n_threads", [](const PyContext & c) { return c.params().n_threads; })
        .def_property_readonly("max_batch", [](const PyContext & c) { return c.params().max_batch; })
        .def_property_readonly("max_graph_bytes", [](const PyContext & c) { return c.params().max_graph_bytes; })
        .def("set_threads", [](PyContext & c, int n) { check(jepa_context_set_threads(c.handle.get(), n)); })
        .def("set_max_batch", [](PyContext & c, int n) { check(jepa_context_set_max_batch(c.handle.get(), n)); })
        .def("encode", &PyContext::encode, py::arg("pixels"))
        .def("classify", &PyContext::classify, py::arg("tokens"))
        .def("predict", &PyContext::predict, py::arg("tokens"), py::arg("context_ids"), py::arg("target_ids"),
             py::arg("mask_index") = 1, py::arg("grid_h") = 0, py::arg("grid_w") = 0)
        .def("lewm_embed", &PyContext::lewm_embed, py::arg("pixels"))
        .def("lewm_project", &PyContext::lewm_project, py::arg("cls"))
        .def("lewm_predict", &PyContext::lewm_predict, py::arg("embeddings"), py::arg("actions"))
        .def("ac_predict", &PyContext::ac_predict, py::arg("latents"), py::arg("actions"), py::arg("states"));
}

}  // namespace jepa_py
