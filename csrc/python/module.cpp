// jepa._engine: a thin 1:1 wrapper of the C API. One file per concern.
#include "py_common.h"

#include <string>

namespace jepa_py {

void raise_status(jepa_status status, const char * fallback) {
    std::string msg = jepa_error_text();
    if (msg.empty()) msg = fallback ? fallback : "jepa engine error";
    // The engine keeps its messages UTF-8; decoding with "replace" means a slip still raises the error.
    py::str text = py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(msg.data(), py::ssize_t(msg.size()), "replace"));
    py::object errors = py::module_::import("jepa.errors");
    py::object exc = errors.attr("error_for_status")(int(status), text, std::string(jepa_error_param()));
    PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(exc.ptr())), exc.ptr());
    throw py::error_already_set();
}

void raise_arg(jepa_status status, const char * param, const std::string & message) {
    py::object errors = py::module_::import("jepa.errors");
    py::object exc = errors.attr("error_for_status")(int(status), message, std::string(param));
    PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(exc.ptr())), exc.ptr());
    throw py::error_already_set();
}

}  // namespace jepa_py

PYBIND11_MODULE(_engine, m) {
    m.doc() = "jepa engine (native). Use the jepa package, not this module.";
    m.def("version", &jepa_version);
    m.def("ggml_version", &jepa_ggml_version);
    m.def("has_cuda", [] { return jepa_has_cuda() != 0; });
    m.def("default_threads", &jepa_default_threads,
          "The CPU threads this process may use (affinity, capped by the cgroup's CPU quota): what 0 threads means.");
    m.def("cpu_kernels", &jepa_cpu_kernels);
    m.attr("MAX_BATCH_LIMIT") = JEPA_MAX_BATCH_LIMIT;
    jepa_py::register_model(m);
    jepa_py::register_context(m);
    jepa_py::register_quantize(m);
    jepa_py::register_device(m);
}
