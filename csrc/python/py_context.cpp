#include "py_common.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace jepa_py {

struct PyModel;  // defined in py_model.cpp; we only need its handle
std::shared_ptr<jepa_model> model_handle(const py::object & model);

struct PyContext {
    std::shared_ptr<jepa_model> model;  // keeps the model alive as long as the context
    std::unique_ptr<jepa_context, void (*)(jepa_context *)> handle{nullptr, jepa_context_free};
    int64_t embed_dim = 0;
    int64_t n_levels = 0;
    int64_t pred_out_dim = 0;
    int64_t n_classes = 0;
    jepa_pred_kind pred_kind = JEPA_PRED_NONE;
    int64_t wm_embed_dim = 0;

    // max_output_bytes: None keeps the engine's default (derived from this machine's memory).
    PyContext(const py::object & py_model, int n_threads, int max_batch, int flash_attn, int64_t max_graph_bytes,
              std::optional<int64_t> max_output_bytes) {
        model = model_handle(py_model);
        jepa_context_params p = jepa_context_default_params();
        p.n_threads = n_threads;
        p.max_batch = max_batch;
        p.flash_attn = flash_attn;
        p.max_graph_bytes = max_graph_bytes;
        if (max_output_bytes) p.max_output_bytes = *max_output_bytes;
        jepa_context * c = jepa_context_new(model.get(), &p);
        if (!c) raise_status(jepa_error_status(), "cannot create a context");
        handle.reset(c);
        jepa_model_info i;
        check(jepa_model_get_info(model.get(), &i));
        embed_dim = i.embed_dim;
        n_levels = i.n_levels;
        pred_out_dim = i.pred_out_dim;
        n_classes = i.n_classes;
        pred_kind = i.pred_kind;
        wm_embed_dim = i.wm_embed_dim;
    }

    jepa_context_params params() const {
        jepa_context_params p;
        check(jepa_context_get_params(handle.get(), &p));
        return p;
    }

    // levels: every output level side by side (jepa_encode_levels), [B, N, n_levels * D];
    // ids: int32 [B, n] token ids, the masked encoder (jepa_encode_masked), [B, n, width]
    py::array_t<float> encode(const py::array_t<float, py::array::c_style> & x, bool levels, const py::object & ids_obj) {
        require_shape(x.ndim() == 5, "encode expects a 5-D float32 array [B, C, T, H, W]");
        check_dims(x, "encode");
        const int B = int(x.shape(0)), C = int(x.shape(1)), T = int(x.shape(2)), H = int(x.shape(3)), W = int(x.shape(4));
        int64_t n_tok = jepa_model_n_tokens(model.get(), C, T, H, W);
        if (n_tok < 0) raise_status(jepa_error_status());
        py::array_t<int32_t, py::array::c_style> ids;
        if (!ids_obj.is_none()) {
            ids = ids_obj.cast<py::array_t<int32_t, py::array::c_style>>();
            require_shape(ids.ndim() == 2, "encode: ids must be int32 [B, n]");
            if (ids.shape(0) != B || ids.shape(1) < 1) {
                raise_arg(JEPA_ERR_INVALID_ARG, "ids", "encode: ids must be [B, n] with n >= 1 for pixels [B, C, T, H, W]");
            }
            n_tok = ids.shape(1);
        }
        if (levels && n_levels == 0) {
            check(jepa_encode_levels(handle.get(), nullptr, B, C, T, H, W, nullptr, 0));  // the engine's refusal
        }
        const int64_t width = levels ? embed_dim * n_levels : embed_dim;
        reserve("encode", {B, n_tok, width});
        py::array_t<float> out({int64_t(B), n_tok, width});
        const float * src = x.data();
        float * dst = out.mutable_data();
        const size_t out_len = size_t(out.size());
        const int32_t * keep = ids_obj.is_none() ? nullptr : ids.data();
        const int n_keep = int(n_tok);
        run_nogil([&] {
            if (keep) return jepa_encode_masked(handle.get(), src, B, C, T, H, W, keep, n_keep, levels ? 1 : 0, dst, out_len);
            return levels ? jepa_encode_levels(handle.get(), src, B, C, T, H, W, dst, out_len)
                          : jepa_encode(handle.get(), src, B, C, T, H, W, dst, out_len);
        });
        return out;
    }

    // The compute buffer, in bytes, encode(pixels of this shape) takes (no compute).
    int64_t encode_memory(const std::vector<int> & shape) {
        require_shape(shape.size() == 5, "encode_memory expects a shape [B, C, T, H, W]");
        size_t bytes = 0;
        run_nogil([&] { return jepa_encode_memory(handle.get(), shape[0], shape[1], shape[2], shape[3], shape[4], &bytes); });
        return int64_t(bytes);
    }

    // tokens [B, N, D] -> (logits [B, n_classes], pooled [B, D])
    py::tuple classify(const py::array_t<float, py::array::c_style> & x) {
        require_shape(x.ndim() == 3, "classify expects a 3-D float32 array [B, N, D]");
        check_dims(x, "classify");
        const int B = int(x.shape(0)), N = int(x.shape(1)), D = int(x.shape(2));
        reserve("classify", {B, std::max<int64_t>(n_classes, 1) + embed_dim});
        py::array_t<float> logits({int64_t(B), std::max<int64_t>(n_classes, 1)});
        py::array_t<float> pooled({int64_t(B), embed_dim});
        const float * src = x.data();
        float * lp = logits.mutable_data();
        float * pp = pooled.mutable_data();
        const size_t ll = size_t(logits.size()), pl = size_t(pooled.size());
        run_nogil([&] { return jepa_classify(handle.get(), src, B, N, D, lp, ll, pp, pl); });
        return py::make_tuple(logits, pooled);
    }

    // context tokens [B, Nc, D], ids [B, Nc] and [B, Nt] -> [B, Nt, D]
    // image: V-JEPA 2.1's image modality vector; context: also return the context rows (x_context)
    py::object predict(const py::array_t<float, py::array::c_style> & x,
                       const py::array_t<int32_t, py::array::c_style> & ctx_ids,
                       const py::array_t<int32_t, py::array::c_style> & tgt_ids, int mask_index, int grid_h, int grid_w,
                       bool image, bool context) {
        require_shape(x.ndim() == 3 && ctx_ids.ndim() == 2 && tgt_ids.ndim() == 2,
                      "predict expects tokens [B, Nc, D] and int32 ids [B, Nc], [B, Nt]");
        check_dims(x, "predict");
        check_dims(tgt_ids, "predict");
        const int B = int(x.shape(0)), Nc = int(x.shape(1)), D = int(x.shape(2)), Nt = int(tgt_ids.shape(1));
        if (ctx_ids.shape(0) != B || ctx_ids.shape(1) != Nc || tgt_ids.shape(0) != B) {
            raise_arg(JEPA_ERR_INVALID_ARG, ctx_ids.shape(0) != B || ctx_ids.shape(1) != Nc ? "context_ids" : "target_ids",
                      "predict: the id arrays must be [B, Nc] and [B, Nt] for tokens [B, Nc, D]");
        }
        const int64_t W = std::max<int64_t>(pred_out_dim, 1);
        reserve("predict", {B, int64_t(Nt) + (context ? Nc : 0), W});
        py::array_t<float> out({int64_t(B), int64_t(Nt), W});
        py::array_t<float> ctx_out({context ? int64_t(B) : 0, int64_t(Nc), W});
        jepa_predict_params p = jepa_predict_default_params();
        p.mask_index = mask_index;
        p.grid_h = grid_h;
        p.grid_w = grid_w;
        p.image = image ? 1 : 0;
        p.context_out = context ? ctx_out.mutable_data() : nullptr;
        p.context_out_len = context ? size_t(ctx_out.size()) : 0;
        const float * src = x.data();
        const int32_t * ci = ctx_ids.data();
        const int32_t * ti = tgt_ids.data();
        float * dst = out.mutable_data();
        const size_t out_len = size_t(out.size());
        run_nogil([&] { return jepa_predict(handle.get(), src, B, Nc, D, ci, ti, Nt, &p, dst, out_len); });
        if (context) return py::make_tuple(out, ctx_out);
        return std::move(out);
    }

    // encoder tokens [B, N, E] -> the world model's latents (ac: [B, N, E]; lewm: [B, 1, D])
    py::array_t<float> world_latents(const py::array_t<float, py::array::c_style> & x) {
        require_shape(x.ndim() == 3, "world_latents expects a 3-D float32 array [B, N, E]");
        check_dims(x, "world_latents");
        const int B = int(x.shape(0)), N = int(x.shape(1)), E = int(x.shape(2));
        const int64_t rows = pred_kind == JEPA_PRED_AC ? N : 1;
        const int64_t width = pred_kind == JEPA_PRED_AC ? E : std::max<int64_t>(wm_embed_dim, 1);
        reserve("world_latents", {B, rows, width});
        py::array_t<float> out({int64_t(B), rows, width});
        const float * src = x.data();
        float * dst = out.mutable_data();
        const size_t len = size_t(out.size());
        run_nogil([&] { return jepa_world_latents(handle.get(), src, B, N, E, dst, len); });
        return out;
    }

    // latents [B, T*P, D], actions [B, T, A], states [B, T, S] or None -> pred [B, T*P, D], or
    // (pred, raw, act_emb) with taps (lewm)
    py::object world_predict(const py::array_t<float, py::array::c_style> & z,
                             const py::array_t<float, py::array::c_style> & a, const py::object & states, bool taps) {
        require_shape(z.ndim() == 3 && a.ndim() == 3, "world_predict expects latents [B, T*P, D] and actions [B, T, A]");
        check_dims(z, "world_predict");
        check_dims(a, "world_predict");
        py::array_t<float, py::array::c_style> s;
        const bool has_states = !states.is_none();
        if (has_states) {
            s = states.cast<py::array_t<float, py::array::c_style>>();
            require_shape(s.ndim() == 3, "world_predict expects states [B, T, S]");
            check_dims(s, "world_predict");
        }
        const int B = int(z.shape(0)), N = int(z.shape(1)), D = int(z.shape(2)), T = int(a.shape(1));
        const char * bad = nullptr;
        if (a.shape(0) != B || N % T != 0) bad = "actions";
        else if (has_states && (s.shape(0) != B || s.shape(1) != T)) bad = "states";
        if (bad) {
            raise_arg(JEPA_ERR_INVALID_ARG, bad,
                      std::string("world_predict: ") + bad +
                          " must be [B, T, ...] for latents [B, T*P, D] with the same B, and T dividing the latent rows");
        }
        jepa_world_input in{};
        in.kind = pred_kind;
        in.B = B;
        in.T = T;
        in.P = N / T;
        in.D = D;
        in.A = int(a.shape(2));
        in.S = has_states ? int(s.shape(2)) : 0;
        in.latents = z.data();
        in.actions = a.data();
        in.states = has_states ? s.data() : nullptr;
        std::vector<int64_t> shape = {int64_t(B), int64_t(N), int64_t(D)};
        reserve("world_predict", {B, N, D, taps ? 3 : 1});
        py::array_t<float> pred(shape);
        py::array_t<float> raw(taps ? shape : std::vector<int64_t>{0});
        py::array_t<float> act(taps ? shape : std::vector<int64_t>{0});
        jepa_world_output out{};
        out.pred = pred.mutable_data();
        out.raw = taps ? raw.mutable_data() : nullptr;
        out.act_emb = taps ? act.mutable_data() : nullptr;
        out.len = size_t(pred.size());
        run_nogil([&] { return jepa_world_predict(handle.get(), &in, &out); });
        if (!taps) return std::move(pred);
        return py::make_tuple(pred, raw, act);
    }

    // context [P, D], actions [B, H, A], states [B, H, S] -> frames [B, H, P, D] (ac: a whole rollout)
    py::array_t<float> world_rollout(const py::array_t<float, py::array::c_style> & z,
                                     const py::array_t<float, py::array::c_style> & a,
                                     const py::array_t<float, py::array::c_style> & s, bool cache) {
        require_shape(z.ndim() == 2 && a.ndim() == 3 && s.ndim() == 3,
                      "world_rollout expects context [P, D], actions [B, H, A] and states [B, H, S]");
        check_dims(z, "world_rollout");
        check_dims(a, "world_rollout");
        check_dims(s, "world_rollout");
        const int B = int(a.shape(0)), H = int(a.shape(1)), P = int(z.shape(0)), D = int(z.shape(1));
        if (s.shape(0) != B || s.shape(1) != H) {
            raise_arg(JEPA_ERR_INVALID_ARG, "states", "world_rollout: states must be [B, H, S] for actions [B, H, A]");
        }
        jepa_world_rollout_input in{};
        in.kind = pred_kind;
        in.B = B;
        in.H = H;
        in.P = P;
        in.D = D;
        in.context = z.data();
        in.A = int(a.shape(2));
        in.S = int(s.shape(2));
        in.actions = a.data();
        in.states = s.data();
        jepa_world_rollout_params p = jepa_world_rollout_default_params();
        p.cache = cache ? 1 : 0;
        reserve("world_rollout", {B, H, P, D});
        py::array_t<float> frames({int64_t(B), int64_t(H), int64_t(P), int64_t(D)});
        float * dst = frames.mutable_data();
        const size_t len = size_t(frames.size());
        run_nogil([&] { return jepa_world_rollout(handle.get(), &in, &p, dst, len); });
        return frames;
    }

    // Text models: token ids of sequences laid end to end -> [n_tok, D] (pool 0) or [n_seq, D].
    py::array_t<float> encode_text(const py::array_t<int32_t, py::array::c_style> & ids,
                                   const py::array_t<int32_t, py::array::c_style> & seq_len, const py::object & type_ids,
                                   int pool, bool normalize) {
        require_shape(ids.ndim() == 1 && seq_len.ndim() == 1, "encode_text expects int32 ids [n_tok] and seq_len [n_seq]");
        check_dims(ids, "encode_text");
        check_dims(seq_len, "encode_text");
        py::array_t<int32_t, py::array::c_style> types;
        if (!type_ids.is_none()) {
            types = type_ids.cast<py::array_t<int32_t, py::array::c_style>>();
            if (types.ndim() != 1 || types.shape(0) != ids.shape(0)) {
                raise_arg(JEPA_ERR_INVALID_ARG, "type_ids", "encode_text: type_ids must be int32 [n_tok], like ids");
            }
        }
        const int n_seq = int(seq_len.shape(0));
        int64_t total = 0;
        const int32_t * lens = seq_len.data();
        for (int s = 0; s < n_seq; ++s) total += std::max<int32_t>(lens[s], 0);
        if (total != ids.shape(0)) {
            raise_arg(JEPA_ERR_INVALID_ARG, "seq_len",
                      "encode_text: seq_len sums to " + std::to_string(total) + " tokens, ids holds " +
                          std::to_string(ids.shape(0)));
        }
        const int64_t rows = pool == JEPA_POOLING_NONE ? total : n_seq;
        reserve("encode_text", {rows, embed_dim});
        py::array_t<float> out({rows, embed_dim});
        const int32_t * ip = ids.data();
        const int32_t * tp = type_ids.is_none() ? nullptr : types.data();
        float * dst = out.mutable_data();
        const size_t len = size_t(out.size());
        run_nogil([&] {
            return jepa_encode_text(handle.get(), ip, tp, lens, n_seq, jepa_pooling_type(pool), normalize ? 1 : 0, dst, len);
        });
        return out;
    }

    // The context's max_output_bytes, asked before an output is allocated (the dims saturate, never wrap).
    void reserve(const char * what, std::initializer_list<int64_t> dims) const {
        int64_t n = 1;
        for (int64_t d : dims) {
            if (__builtin_mul_overflow(n, std::max<int64_t>(d, 0), &n)) n = INT64_MAX;
        }
        check(jepa_context_check_output(handle.get(), what, n));
    }

    template <typename T>
    static void check_dims(const py::array_t<T, py::array::c_style> & x, const char * what) {
        for (int d = 0; d < x.ndim(); ++d) {
            if (x.shape(d) < 1 || x.shape(d) > INT32_MAX) {
                jepa_error_clear();
                raise_status(JEPA_ERR_INVALID_ARG, (std::string(what) + ": every dimension must be in [1, 2^31)").c_str());
            }
        }
    }
};

void register_context(py::module_ & m) {
    // The engine's defaults, read by every layer above (never retyped as literals). Bound field by
    // field like ModelInfo (py_model.cpp): each attribute is the C field of that name.
    using CP = jepa_context_params;
    py::class_<CP>(m, "ContextParams", "jepa_context_params; read-only.")
        JEPA_FIELD(CP, n_threads) JEPA_FIELD(CP, max_batch) JEPA_FIELD(CP, flash_attn) JEPA_FIELD(CP, max_graph_bytes)
        JEPA_FIELD(CP, max_output_bytes);
    m.def("context_default_params", &jepa_context_default_params);
    using PP = jepa_predict_params;
    py::class_<PP>(m, "PredictParams", "jepa_predict_params; read-only.")
        JEPA_FIELD(PP, mask_index) JEPA_FIELD(PP, grid_h) JEPA_FIELD(PP, grid_w);
    m.def("predict_default_params", &jepa_predict_default_params);
    py::class_<jepa_world_rollout_params>(m, "WorldRolloutParams", "jepa_world_rollout_params; read-only.")
        JEPA_FIELD(jepa_world_rollout_params, cache);
    m.def("world_rollout_default_params", &jepa_world_rollout_default_params);

    const jepa_context_params d = jepa_context_default_params();
    const jepa_predict_params pd = jepa_predict_default_params();
    const jepa_world_rollout_params wd = jepa_world_rollout_default_params();
    py::class_<PyContext>(m, "Context")
        .def(py::init<const py::object &, int, int, int, int64_t, std::optional<int64_t>>(), py::arg("model"),
             py::arg("n_threads") = d.n_threads, py::arg("max_batch") = d.max_batch, py::arg("flash_attn") = d.flash_attn,
             py::arg("max_graph_bytes") = d.max_graph_bytes, py::arg("max_output_bytes") = py::none())
        .def_property_readonly("n_threads", [](const PyContext & c) { return c.params().n_threads; })
        .def_property_readonly("max_batch", [](const PyContext & c) { return c.params().max_batch; })
        .def_property_readonly("max_graph_bytes", [](const PyContext & c) { return c.params().max_graph_bytes; })
        .def_property_readonly("max_output_bytes", [](const PyContext & c) { return c.params().max_output_bytes; })
        .def("set_threads", [](PyContext & c, int n) { check(jepa_context_set_threads(c.handle.get(), n)); })
        .def("set_max_batch", [](PyContext & c, int n) { check(jepa_context_set_max_batch(c.handle.get(), n)); })
        .def("encode", &PyContext::encode, py::arg("pixels"), py::arg("levels") = false, py::arg("ids") = py::none())
        .def("encode_memory", &PyContext::encode_memory, py::arg("shape"))
        .def("classify", &PyContext::classify, py::arg("tokens"))
        .def("predict", &PyContext::predict, py::arg("tokens"), py::arg("context_ids"), py::arg("target_ids"),
             py::arg("mask_index") = pd.mask_index, py::arg("grid_h") = pd.grid_h, py::arg("grid_w") = pd.grid_w,
             py::arg("image") = false, py::arg("context") = false)
        .def("world_latents", &PyContext::world_latents, py::arg("tokens"))
        .def("encode_text", &PyContext::encode_text, py::arg("ids"), py::arg("seq_len"), py::arg("type_ids") = py::none(),
             py::arg("pool") = int(JEPA_POOLING_NONE), py::arg("normalize") = false)
        .def("world_predict", &PyContext::world_predict, py::arg("latents"), py::arg("actions"),
             py::arg("states") = py::none(), py::arg("taps") = false)
        .def("world_rollout", &PyContext::world_rollout, py::arg("context"), py::arg("actions"), py::arg("states"),
             py::arg("cache") = wd.cache != 0);
}

}  // namespace jepa_py
