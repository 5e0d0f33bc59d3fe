// Devices: what a backend reports about its memory, so the server sizes its batches from what is
// left once a model is placed.
#include "py_common.h"

#include <pybind11/stl.h>

#include <utility>

namespace jepa_py {

void register_device(py::module_ & m) {
    m.def(
        "device_memory",
        [](int kind, int index) {
            size_t free = 0, total = 0;
            check(jepa_device_memory(jepa_device(kind), index, &free, &total));
            return std::make_pair(free, total);
        },
        py::arg("kind"), py::arg("index") = 0,
        "(free, total) bytes of a device (kind 0 CPU, 1 CUDA) as its backend reports them now.");
}

}  // namespace jepa_py
