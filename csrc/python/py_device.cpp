// Devices: what a backend reports about its memory, so the server sizes its batches from what is
// left once a model is placed.
#include "py_common.h"

#include <pybind11/stl.h>

#include "ggml-backend.h"
#ifdef JEPA_USE_CUDA
#include "ggml-cuda.h"
#endif

#include <string>
#include <utility>

namespace jepa_py {

namespace {

// (free, total) bytes of a device (kind: jepa_device) as its backend reports them now.
std::pair<size_t, size_t> device_memory(int kind, int index) {
    size_t free = 0, total = 0;
    if (kind == JEPA_DEVICE_CPU) {
        ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        if (!dev) raise_arg(JEPA_ERR_BACKEND, "device", "no CPU backend device");
        ggml_backend_dev_memory(dev, &free, &total);
    } else if (kind == JEPA_DEVICE_CUDA) {
#ifdef JEPA_USE_CUDA
        const int n = ggml_backend_cuda_get_device_count();
        if (index < 0 || index >= n) {
            raise_arg(JEPA_ERR_INVALID_ARG, "device",
                      "CUDA device " + std::to_string(index) + " does not exist (" + std::to_string(n) + " found)");
        }
        ggml_backend_cuda_get_device_memory(index, &free, &total);
#else
        (void) index;
        raise_arg(JEPA_ERR_UNSUPPORTED, "device", "this build has no CUDA backend (rebuild with -DJEPA_CUDA=ON)");
#endif
    } else {
        raise_arg(JEPA_ERR_INVALID_ARG, "device", "unknown device kind " + std::to_string(kind));
    }
    return {free, total};
}

}  // namespace

void register_device(py::module_ & m) {
    m.def("device_memory", &device_memory, py::arg("kind"), py::arg("index") = 0,
          "(free, total) bytes of a device (kind 0 CPU, 1 CUDA) as its backend reports them now.");
}

}  // namespace jepa_py
