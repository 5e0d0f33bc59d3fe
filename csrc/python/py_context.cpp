#include "py_common.h"

#include <algorithm>
#include <memory>
#include <string>

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
        if (x.ndim() != 5) {
            PyErr_SetString(PyExc_ValueError, "encode expects a 5-D float32 array [B, C, T, H, W]");
            throw py::error_already_set();
        }
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
        jepa_status st;
        {
            py::gil_scoped_release nogil;
            st = jepa_encode(handle.get(), src, B, C, T, H, W, dst, out_len);
        }
        check(st);
        return out;
    }

    // tokens [B, N, D] -> (logits [B, n_classes], pooled [B, D])
    py::tuple classify(const py::array_t<float, py::array::c_style> & x) {
        if (x.ndim() != 3) {
            PyErr_SetString(PyExc_ValueError, "classify expects a 3-D float32 array [B, N, D]");
            throw py::error_already_set();
        }
        check_dims(x, "classify");
        const int B = int(x.shape(0)), N = int(x.shape(1)), D = int(x.shape(2));
        py::array_t<float> logits({int64_t(B), std::max<int64_t>(n_classes, 1)});
        py::array_t<float> pooled({int64_t(B), embed_dim});
        const float * src = x.data();
        float * lp = logits.mutable_data();
        float * pp = pooled.mutable_data();
        const size_t ll = size_t(logits.size()), pl = size_t(pooled.size());
        jepa_status st;
        {
            py::gil_scoped_release nogil;
            st = jepa_classify(handle.get(), src, B, N, D, lp, ll, pp, pl);
        }
        check(st);
        return py::make_tuple(logits, pooled);
    }

    // context tokens [B, Nc, D], ids [B, Nc] and [B, Nt] -> [B, Nt, D]
    py::array_t<float> predict(const py::array_t<float, py::array::c_style> & x,
                               const py::array_t<int32_t, py::array::c_style> & ctx_ids,
                               const py::array_t<int32_t, py::array::c_style> & tgt_ids, int mask_index, int grid_h,
                               int grid_w) {
        if (x.ndim() != 3 || ctx_ids.ndim() != 2 || tgt_ids.ndim() != 2) {
            PyErr_SetString(PyExc_ValueError, "predict expects tokens [B, Nc, D] and int32 ids [B, Nc], [B, Nt]");
            throw py::error_already_set();
        }
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
        jepa_status st;
        {
            py::gil_scoped_release nogil;
            st = jepa_predict(handle.get(), src, B, Nc, D, ci, ti, Nt, &p, dst, out_len);
        }
        check(st);
        return out;
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
             py::arg("mask_index") = 1, py::arg("grid_h") = 0, py::arg("grid_w") = 0);
}

}  // namespace jepa_py
