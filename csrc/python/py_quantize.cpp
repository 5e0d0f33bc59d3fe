// jepa._engine.quantize / type_row_bytes / type_id: the C API's quantization, for jepa-quantize.
#include "py_common.h"

#include <string>

namespace jepa_py {

void register_quantize(py::module_ & m) {
    m.def(
        "type_id", [](const std::string & type) {
            const int id = jepa_type_id(type.c_str());
            if (id < 0) raise_status(jepa_error_status());
            return id;
        },
        py::arg("type"), "The ggml type id of a jepa-quantize type name.");
    m.def(
        "type_row_bytes",
        [](const std::string & type, int64_t n_per_row) {
            const int64_t n = jepa_type_row_bytes(type.c_str(), n_per_row);
            if (n < 0) raise_status(jepa_error_status());
            return n;
        },
        py::arg("type"), py::arg("n_per_row"), "Bytes of one row in `type` (UnsupportedError when its blocks do not divide it).");
    m.def(
        "quantize",
        [](const std::string & type, const py::array_t<float, py::array::c_style | py::array::forcecast> & x) {
            require_shape(x.ndim() == 2, "quantize expects a 2-D float32 array [rows, n_per_row]");
            const int64_t rows = x.shape(0), n = x.shape(1);
            const int64_t row = jepa_type_row_bytes(type.c_str(), n);
            if (row < 0) raise_status(jepa_error_status());
            py::array_t<uint8_t> out({rows, row});
            const float * src = x.data();
            uint8_t * dst = out.mutable_data();
            const size_t len = size_t(out.size());
            const std::string t = type;
            run_nogil([&] { return jepa_quantize(t.c_str(), src, rows, n, dst, len); });
            return out;
        },
        py::arg("type"), py::arg("rows"), "float32 rows [R, N] -> their bytes in `type` [R, row_bytes] (uint8).");
}

}  // namespace jepa_py
