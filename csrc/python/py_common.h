// Shared pieces of the pybind11 module: raising jepa.errors classes from engine statuses.
#pragma once

#include "jepa.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace jepa_py {

// Raise the jepa.errors exception for `status` with the thread's engine message.
[[noreturn]] void raise_status(jepa_status status, const char * fallback = nullptr);

inline void check(jepa_status status) {
    if (status != JEPA_OK) raise_status(status);
}

void register_model(py::module_ & m);
void register_context(py::module_ & m);

}  // namespace jepa_py
