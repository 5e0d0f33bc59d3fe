// Shared pieces of the pybind11 module: raising jepa.errors classes from engine statuses.
#pragma once

#include "jepa.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

namespace py = pybind11;

namespace jepa_py {

// Raise the jepa.errors exception for `status` with the thread's engine message.
[[noreturn]] void raise_status(jepa_status status, const char * fallback = nullptr);
// Raise a refusal the binding itself makes (before the engine), naming the argument as the engine does.
[[noreturn]] void raise_arg(jepa_status status, const char * param, const std::string & message);

inline void check(jepa_status status) {
    if (status != JEPA_OK) raise_status(status);
}

// A wrong array rank is a ValueError (the Python layer checks first; this guards direct use).
inline void require_shape(bool ok, const char * message) {
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, message);
        throw py::error_already_set();
    }
}

// A plain C field bound read-only under its own name, in a py::class_ chain: `JEPA_FIELD(T, f)` is
// `.def_readonly("f", &T::f)`, so the Python name is the C one by construction (written once).
#define JEPA_FIELD(T, f) .def_readonly(#f, &T::f)

// Run an engine call with the GIL released, then raise its status as a jepa error.
template <class F>
void run_nogil(F && call) {
    jepa_status st;
    {
        py::gil_scoped_release nogil;
        st = call();
    }
    check(st);
}

void register_model(py::module_ & m);
void register_context(py::module_ & m);
void register_quantize(py::module_ & m);
void register_device(py::module_ & m);

}  // namespace jepa_py
