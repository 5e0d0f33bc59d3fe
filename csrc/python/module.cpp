// jepa._engine: a thin 1:1 wrapper of the C API. One file per concern.
#include "py_common.h"

#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

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
    m.def("cpu_features", &jepa_cpu_features, "The CPU features the engine runs with (JEPA_CPU_FEATURES applied), space-separated.");
    m.def("cpu_features_detected", &jepa_cpu_features_detected, "The CPU features this CPU has, unmasked.");
    m.def("cpu_feature_names", &jepa_cpu_feature_names, "Every CPU feature name the engine knows, space-separated.");
    m.def("cpu_features_mask", &jepa_cpu_features_mask, "JEPA_CPU_FEATURES as given (\"\" when unset).");
    m.def("cpu_features_mask_error", &jepa_cpu_features_mask_error, "Why JEPA_CPU_FEATURES was refused (\"\" when it was not).");
    m.def("cpu_classes", [] {
        std::vector<std::tuple<std::string, std::string, std::string>> out;
        for (int i = 0; i < jepa_cpu_class_count(); ++i) {
            jepa_cpu_class c;
            if (jepa_cpu_class_get(i, &c) == JEPA_OK) out.emplace_back(c.name, c.features, c.example);
        }
        return out;
    }, "The CPU classes JEPA_CPU_FEATURES takes: (name, features, the CPUs it stands for).");
    m.def("kernel_paths", [] {
        std::vector<py::dict> out;
        for (int i = 0; i < jepa_kernel_path_count(); ++i) {
            jepa_kernel_path k;
            if (jepa_kernel_path_get(i, &k) != JEPA_OK) continue;
            py::dict d;
            d["name"] = k.name;
            d["f32_cap"] = k.f32_cap;
            d["bf16_cap"] = k.bf16_cap;
            d["q8_cap"] = k.q8_cap;
            d["amx"] = k.amx != 0;
            d["stands_for"] = k.stands_for;
            d["kernels"] = k.kernels;
            d["f32"] = k.f32;
            d["bf16"] = k.bf16;
            d["q8"] = k.q8;
            d["selected"] = k.selected != 0;
            out.push_back(d);
        }
        return out;
    }, "The kernel-path table (one dict per JEPA_GEMM value, the default first) and what each runs here.");
    m.def("kernel_paths_distinct", [](const std::string & kinds, bool with_ggml) {
        const char * s = jepa_kernel_paths_distinct(kinds.c_str(), with_ggml ? 1 : 0);
        if (!s) jepa_py::raise_status(jepa_error_status(), "unknown kernel kind");
        return std::string(s);
    }, py::arg("kinds") = "", py::arg("with_ggml") = false,
       "The JEPA_GEMM values that run something else than this process in those kinds (f32, bf16, q8), space-separated.");
    m.attr("MAX_BATCH_LIMIT") = JEPA_MAX_BATCH_LIMIT;
    jepa_py::register_model(m);
    jepa_py::register_context(m);
    jepa_py::register_quantize(m);
    jepa_py::register_device(m);
}
