#include "py_common.h"

#include <memory>
#include <string>

namespace jepa_py {

namespace {

const char * pos_name(jepa_pos_type p) {
    switch (p) {
        case JEPA_POS_NONE: return "none";
        case JEPA_POS_LEARNED: return "learned";
        case JEPA_POS_SINCOS2D: return "sincos2d";
        case JEPA_POS_SINCOS3D: return "sincos3d";
        case JEPA_POS_ROPE3D: return "rope3d";
    }
    return "unknown";
}

}  // namespace

struct PyModel {
    std::shared_ptr<jepa_model> handle;

    PyModel(const std::string & path, int device, int device_index) {
        jepa_model_params p = jepa_model_default_params();
        p.device = jepa_device(device);
        p.device_index = device_index;
        jepa_model * m = nullptr;
        {
            py::gil_scoped_release nogil;
            m = jepa_model_load(path.c_str(), &p);
        }
        if (!m) raise_status(jepa_error_status(), "cannot load the model");
        handle.reset(m, jepa_model_free);
    }

    py::dict info() const {
        jepa_model_info i;
        check(jepa_model_get_info(handle.get(), &i));
        py::dict d;
        d["name"] = i.name;
        d["family"] = i.family;
        d["modality"] = i.modality;
        d["backend"] = i.backend;
        d["matmul"] = i.matmul;
        d["n_matmul_packed"] = i.n_matmul_packed;
        d["file_type"] = i.file_type;
        d["n_params"] = i.n_params;
        d["n_bytes"] = i.n_bytes;
        d["embed_dim"] = i.embed_dim;
        d["n_layer"] = i.n_layer;
        d["n_head"] = i.n_head;
        d["ffn_dim"] = i.ffn_dim;
        d["patch_size"] = i.patch_size;
        d["tubelet_size"] = i.tubelet_size;
        d["img_size"] = i.img_size;
        d["n_frames"] = i.n_frames;
        d["in_chans"] = i.in_chans;
        d["has_cls"] = bool(i.has_cls);
        d["n_registers"] = i.n_registers;
        d["pos_type"] = pos_name(i.pos_type);
        d["ln_eps"] = i.ln_eps;
        d["has_head"] = bool(i.has_head);
        d["has_predictor"] = bool(i.has_predictor);
        d["n_labels"] = i.n_labels;
        d["n_classes"] = i.n_classes;
        d["pred_embed_dim"] = i.pred_embed_dim;
        d["pred_n_layer"] = i.pred_n_layer;
        d["pred_n_head"] = i.pred_n_head;
        d["pred_n_mask_tokens"] = i.pred_n_mask_tokens;
        d["pred_grid_size"] = i.pred_grid_size;
        d["pred_kind"] = i.pred_kind ? i.pred_kind : "";
        d["pred_action_dim"] = i.pred_action_dim;
        d["pred_state_dim"] = i.pred_state_dim;
        d["pred_n_frames"] = i.pred_n_frames;
        d["wm_embed_dim"] = i.wm_embed_dim;
        d["pred_norm_reps_eps"] = i.pred_norm_reps_eps;
        py::dict pre;
        pre["mean"] = py::make_tuple(i.mean[0], i.mean[1], i.mean[2]);
        pre["std"] = py::make_tuple(i.std[0], i.std[1], i.std[2]);
        pre["rescale"] = i.rescale;
        pre["resize_short"] = i.resize_short;
        pre["crop"] = i.crop;
        pre["resize_mode"] = i.resize_mode == JEPA_RESIZE_SQUASH ? "squash" : "shortest_edge";
        pre["resample"] = i.resample == JEPA_RESAMPLE_BICUBIC ? "bicubic" : "bilinear";
        d["preprocess"] = pre;
        return d;
    }

    py::list labels() const {
        jepa_model_info i;
        check(jepa_model_get_info(handle.get(), &i));
        py::list out;
        for (int k = 0; k < i.n_labels; ++k) out.append(jepa_model_label(handle.get(), k));
        return out;
    }

    int64_t n_tokens(int T, int H, int W) const {
        const int64_t n = jepa_model_n_tokens(handle.get(), T, H, W);
        if (n < 0) raise_status(jepa_error_status());
        return n;
    }
};

void register_model(py::module_ & m) {
    py::class_<PyModel, std::shared_ptr<PyModel>>(m, "Model")
        .def(py::init<const std::string &, int, int>(), py::arg("path"), py::arg("device") = 0,
             py::arg("device_index") = 0)
        .def("info", &PyModel::info)
        .def("labels", &PyModel::labels)
        .def("n_tokens", &PyModel::n_tokens, py::arg("T"), py::arg("H"), py::arg("W"));
}

}  // namespace jepa_py

namespace jepa_py {

std::shared_ptr<jepa_model> model_handle(const py::object & model) { return model.cast<PyModel &>().handle; }

}  // namespace jepa_py
