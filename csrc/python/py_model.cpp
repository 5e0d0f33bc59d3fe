#include "py_common.h"

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

namespace jepa_py {

// jepa_model_info with its strings owned, so a ModelInfo outlives nothing it points into. The
// numeric fields are the C struct's own (bound by member pointer, read-only): one description of
// a model from the engine to every Python layer.
struct ModelInfo : jepa_model_info {
    std::string name_s, family_s, modality_s, backend_s, matmul_s;
};

struct Preprocess {
    py::tuple mean, std;
    float rescale;
    int resize_short, crop;
    jepa_resize_mode resize_mode;
    jepa_resample resample;
};

struct PyModel {
    std::shared_ptr<jepa_model> handle;

    PyModel(const std::string & path, int device, int device_index, bool use_mmap) {
        // The C API takes a C string: a NUL would load the file named by the part before it.
        if (path.find('\0') != std::string::npos) {
            raise_arg(JEPA_ERR_INVALID_ARG, "path", "model path contains a NUL byte");
        }
        jepa_model_params p = jepa_model_default_params();
        p.device = jepa_device(device);
        p.device_index = device_index;
        p.use_mmap = use_mmap ? 1 : 0;
        jepa_model * m = nullptr;
        {
            py::gil_scoped_release nogil;
            m = jepa_model_load(path.c_str(), &p);
        }
        if (!m) raise_status(jepa_error_status(), "cannot load the model");
        handle.reset(m, jepa_model_free);
    }

    ModelInfo info() const {
        ModelInfo i;
        check(jepa_model_get_info(handle.get(), &i));
        i.name_s = i.name;
        i.family_s = i.family;
        i.modality_s = i.modality;
        i.backend_s = i.backend;
        i.matmul_s = i.matmul;
        i.name = i.family = i.modality = i.backend = i.matmul = nullptr;  // only the owned copies are read
        return i;
    }

    py::list labels() const {
        jepa_model_info i;
        check(jepa_model_get_info(handle.get(), &i));
        py::list out;
        for (int k = 0; k < i.n_labels; ++k) out.append(jepa_model_label(handle.get(), k));
        return out;
    }

    // The reason the mapped file changed since the load, or None (jepa_model_file_changed).
    py::object file_changed() const {
        if (!jepa_model_file_changed(handle.get())) return py::none();
        return py::str(jepa_error_text());
    }

    std::string tokenizer() const {
        const char * t = jepa_model_tokenizer(handle.get());
        if (!t) raise_status(jepa_error_status());
        return t;
    }

    int64_t n_tokens(int C, int T, int H, int W) const {
        const int64_t n = jepa_model_n_tokens(handle.get(), C, T, H, W);
        if (n < 0) raise_status(jepa_error_status());
        return n;
    }
};

// One Python enum for a C enum, its members spelled as in the C API without the prefix.
template <class E>
void bind_enum(py::module_ & m, const char * name, const char * doc,
               std::initializer_list<std::pair<const char *, E>> members) {
    py::enum_<E> e(m, name, doc);
    for (const auto & [member, value] : members) e.value(member, value);
}

void register_enums(py::module_ & m) {
    bind_enum<jepa_pred_kind>(m, "PredictorKind", "The predictor a file holds (jepa.pred.kind).",
                              {{"NONE", JEPA_PRED_NONE}, {"MASKED", JEPA_PRED_MASKED}, {"AC", JEPA_PRED_AC},
                               {"LEWM", JEPA_PRED_LEWM}});
    bind_enum<jepa_head_kind>(m, "HeadKind", "The head a file holds (jepa.head.kind).",
                              {{"NONE", JEPA_HEAD_NONE}, {"ATTENTIVE_POOL", JEPA_HEAD_ATTENTIVE_POOL}});
    bind_enum<jepa_pos_type>(m, "PosType", "The encoder's positions (jepa.enc.pos_type).",
                             {{"NONE", JEPA_POS_NONE}, {"LEARNED", JEPA_POS_LEARNED}, {"SINCOS2D", JEPA_POS_SINCOS2D},
                              {"SINCOS3D", JEPA_POS_SINCOS3D}, {"ROPE3D", JEPA_POS_ROPE3D}});
    bind_enum<jepa_pooling_type>(m, "Pooling", "How an item's tokens become one vector (jepa_pooling_type).",
                                 {{"NONE", JEPA_POOLING_NONE}, {"CLS", JEPA_POOLING_CLS}, {"MEAN", JEPA_POOLING_MEAN},
                                  {"LAST", JEPA_POOLING_LAST}, {"LEWM", JEPA_POOLING_LEWM},
                                  {"LEVELS", JEPA_POOLING_LEVELS}});
    bind_enum<jepa_resize_mode>(m, "ResizeMode", "How a frame is resized (jepa.pre.resize_mode).",
                                {{"SHORTEST_EDGE", JEPA_RESIZE_SHORTEST_EDGE}, {"SQUASH", JEPA_RESIZE_SQUASH}});
    bind_enum<jepa_resample>(m, "Resample", "The resize filter (jepa.pre.resample).",
                             {{"BILINEAR", JEPA_RESAMPLE_BILINEAR}, {"BICUBIC", JEPA_RESAMPLE_BICUBIC}});
}

// Field by field on purpose (the "one description"): each Python attribute is the C field of
// the same name (JEPA_FIELD writes the name once), so a renamed or dropped field fails to compile here.
void register_info(py::module_ & m) {
    py::class_<Preprocess>(m, "Preprocess", "The file's preprocessing recipe (jepa.pre.*); read-only.")
        JEPA_FIELD(Preprocess, mean) JEPA_FIELD(Preprocess, std) JEPA_FIELD(Preprocess, rescale)
        JEPA_FIELD(Preprocess, resize_short) JEPA_FIELD(Preprocess, crop) JEPA_FIELD(Preprocess, resize_mode)
        JEPA_FIELD(Preprocess, resample);

    using I = jepa_model_info;
    py::class_<ModelInfo>(m, "ModelInfo", "What a model is: jepa_model_info, field by field; read-only.")
        .def_readonly("name", &ModelInfo::name_s)
        .def_readonly("family", &ModelInfo::family_s)
        .def_readonly("modality", &ModelInfo::modality_s)
        .def_readonly("backend", &ModelInfo::backend_s)
        .def_readonly("matmul", &ModelInfo::matmul_s)
        JEPA_FIELD(I, n_matmul_packed) JEPA_FIELD(I, file_type) JEPA_FIELD(I, n_params) JEPA_FIELD(I, n_bytes)
        JEPA_FIELD(I, n_bytes_mapped) JEPA_FIELD(I, embed_dim) JEPA_FIELD(I, n_layer) JEPA_FIELD(I, n_head)
        JEPA_FIELD(I, ffn_dim) JEPA_FIELD(I, patch_size) JEPA_FIELD(I, tubelet_size) JEPA_FIELD(I, img_size)
        JEPA_FIELD(I, n_frames) JEPA_FIELD(I, in_chans)
        .def_property_readonly("has_cls", [](const ModelInfo & i) { return i.has_cls != 0; })
        .def_property_readonly("block_causal", [](const ModelInfo & i) { return i.block_causal != 0; })
        .def_readonly("n_levels", &ModelInfo::n_levels)
        .def_property_readonly("image_patch_embed", [](const ModelInfo & i) { return i.image_patch_embed != 0; })
        JEPA_FIELD(I, n_registers) JEPA_FIELD(I, pos_type) JEPA_FIELD(I, ln_eps) JEPA_FIELD(I, head_kind)
        JEPA_FIELD(I, pred_kind) JEPA_FIELD(I, n_labels)
        .def_property_readonly("preprocess",
                               [](const ModelInfo & i) {
                                   return Preprocess{py::make_tuple(i.mean[0], i.mean[1], i.mean[2]),
                                                     py::make_tuple(i.std[0], i.std[1], i.std[2]),
                                                     i.rescale,
                                                     i.resize_short,
                                                     i.crop,
                                                     i.resize_mode,
                                                     i.resample};
                               })
        JEPA_FIELD(I, n_classes) JEPA_FIELD(I, pred_embed_dim) JEPA_FIELD(I, pred_n_layer) JEPA_FIELD(I, pred_n_head)
        JEPA_FIELD(I, pred_n_mask_tokens) JEPA_FIELD(I, pred_grid_size) JEPA_FIELD(I, pred_out_dim)
        JEPA_FIELD(I, pred_in_levels) JEPA_FIELD(I, pred_action_dim)
        JEPA_FIELD(I, pred_state_dim) JEPA_FIELD(I, pred_n_frames) JEPA_FIELD(I, wm_embed_dim)
        JEPA_FIELD(I, pred_norm_reps_eps) JEPA_FIELD(I, vocab_size) JEPA_FIELD(I, n_token_types)
        JEPA_FIELD(I, n_positions) JEPA_FIELD(I, pos_offset) JEPA_FIELD(I, max_tokens) JEPA_FIELD(I, max_seq_len)
        JEPA_FIELD(I, pooling)
        .def_property_readonly("text_normalize", [](const ModelInfo & i) { return i.text_normalize != 0; })
        .def_property_readonly("pred_modality_embed", [](const ModelInfo & i) { return i.pred_modality_embed != 0; })
        .def_property_readonly("pred_proj_context", [](const ModelInfo & i) { return i.pred_proj_context != 0; })
        .def("__repr__", [](const ModelInfo & i) {
            return "ModelInfo(family=" + i.family_s + ", embed_dim=" + std::to_string(i.embed_dim) +
                   ", n_layer=" + std::to_string(i.n_layer) + ", backend=" + i.backend_s + ")";
        });
}

void register_model(py::module_ & m) {
    register_enums(m);
    register_info(m);
    py::class_<PyModel, std::shared_ptr<PyModel>>(m, "Model")
        .def(py::init<const std::string &, int, int, bool>(), py::arg("path"), py::arg("device") = 0,
             py::arg("device_index") = 0, py::arg("use_mmap") = true)
        .def("info", &PyModel::info)
        .def("labels", &PyModel::labels)
        .def("tokenizer", &PyModel::tokenizer)
        .def("file_changed", &PyModel::file_changed)
        .def("n_tokens", &PyModel::n_tokens, py::arg("C"), py::arg("T"), py::arg("H"), py::arg("W"));
}

}  // namespace jepa_py

namespace jepa_py {

std::shared_ptr<jepa_model> model_handle(const py::object & model) { return model.cast<PyModel &>().handle; }

}  // namespace jepa_py
