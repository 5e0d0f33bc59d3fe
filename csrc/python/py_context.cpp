#include "py_common.h"

#include <memory>

namespace jepa_py {

struct PyModel;  // defined in py_model.cpp; we only need its handle
std::shared_ptr<jepa_model> model_handle(const py::object & model);

struct PyContext {
    std::shared_ptr<jepa_model> model;  // keeps the model alive as long as the context
    std::unique_ptr<jepa_context, void (*)(jepa_context *)> handle{nullptr, jepa_context_free};
    int64_t embed_dim = 0;

    PyContext(const py::object & py_model, int n_threads, int max_batch, int flash_attn) {
        model = model_handle(py_model);
        jepa_context_params p = jepa_context_default_params();
        p.n_threads = n_threads;
        p.max_batch = max_batch;
        p.flash_attn = flash_attn;
        jepa_context * c = jepa_context_new(model.get(), &p);
        if (!c) raise_status(jepa_error_status(), "cannot create a context");
        handle.reset(c);
        jepa_model_info i;
        check(jepa_model_get_info(model.get(), &i));
        embed_dim = i.embed_dim;
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
        for (int d = 0; d < 5; ++d) {
            if (x.shape(d) < 1 || x.shape(d) > INT32_MAX) {
                jepa_py::raise_status(JEPA_ERR_INVALID_ARG, "encode: every dimension must be in [1, 2^31)");
            }
        }
        const int B = int(x.shape(0)), C = int(x.shape(1)), T = int(x.shape(2)), H = int(x.shape(3)), W = int(x.shape(4));
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
};

void register_context(py::module_ & m) {
    py::class_<PyContext>(m, "Context")
        .def(py::init<const py::object &, int, int, int>(), py::arg("model"), py::arg("n_threads") = 0,
             py::arg("max_batch") = 32, py::arg("flash_attn") = -1)
        .def_property_readonly("n_threads", [](const PyContext & c) { return c.params().n_threads; })
        .def_property_readonly("max_batch", [](const PyContext & c) { return c.params().max_batch; })
        .def("set_threads", [](PyContext & c, int n) { check(jepa_context_set_threads(c.handle.get(), n)); })
        .def("set_max_batch", [](PyContext & c, int n) { check(jepa_context_set_max_batch(c.handle.get(), n)); })
        .def("encode", &PyContext::encode, py::arg("pixels"));
}

}  // namespace jepa_py
