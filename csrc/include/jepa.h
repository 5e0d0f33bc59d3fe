/*
 * jepa.h — the C API of the jepa engine, on ggml, loaded from GGUF: JEPA image and video encoders,
 * their classifier heads and masked predictors, the V-JEPA 2-AC and LeWM world models, and BERT-style
 * text encoders.
 *
 * Usage:
 *     jepa_model_params mp = jepa_model_default_params();
 *     jepa_model * model = jepa_model_load("vit.gguf", &mp);          // NULL on error
 *     if (!model) { fprintf(stderr, "%s\n", jepa_error_text()); ... }
 *
 *     jepa_context_params cp = jepa_context_default_params();
 *     cp.n_threads = 4;
 *     jepa_context * ctx = jepa_context_new(model, &cp);
 *
 *     // pixels: float32 [B, C, T, H, W], C-contiguous (T = 1 for images)
 *     int64_t n_tok = jepa_model_n_tokens(model, C, T, H, W);             // CLS + registers + patches
 *     float * out = malloc(sizeof(float) * B * n_tok * info.embed_dim);
 *     jepa_status st = jepa_encode(ctx, pixels, B, C, T, H, W, out, B * n_tok * info.embed_dim);
 *
 *     // models with a classifier head (info.head_kind != JEPA_HEAD_NONE): logits and the pooled vector
 *     jepa_classify(ctx, out, B, n_tok, info.embed_dim, logits, B * info.n_classes, pooled, B * info.embed_dim);
 *     // models with a masked predictor (info.pred_kind == JEPA_PRED_MASKED): predictions at target ids
 *     jepa_predict(ctx, ctx_tokens, B, n_ctx, info.embed_dim, ctx_ids, tgt_ids, n_tgt, NULL, pred, len);
 *     // text models (info.modality "text"): token ids laid end to end, no padding; pooled per text
 *     jepa_encode_text(ctx, ids, type_ids, seq_len, n_seq, JEPA_POOLING_MEAN, 1, out, n_seq * info.embed_dim);
 *     // world models (JEPA_PRED_AC, JEPA_PRED_LEWM): tokens -> latents, then one predictor step
 *     jepa_world_latents(ctx, out, B, n_tok, info.embed_dim, latents, len);
 *     jepa_world_predict(ctx, &input, &output);
 *     jepa_world_rollout(ctx, &rollout, NULL, frames, len);                 // ac: a whole rollout
 *
 *     jepa_context_free(ctx);
 *     jepa_model_free(model);
 *
 * Thread contract:
 *   - A model is immutable after jepa_model_load returns; any number of threads may share it
 *     and create contexts from it. Free it only after every context made from it is freed.
 *   - A context is used by one thread at a time. Different contexts run in parallel.
 *   - jepa_error_text() is thread-local: it returns the message of the last failed call made
 *     by the calling thread.
 *
 * Errors: every call returns a jepa_status (or NULL / a negative count) and never aborts the
 * process on bad input or a bad file. NULL arguments are reported as JEPA_ERR_INVALID_ARG. An
 * argument the engine refuses is named by jepa_error_param(), so a caller maps the refusal to its
 * own field without reading the message.
 */
#ifndef JEPA_H
#define JEPA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(JEPA_SHARED)
#  define JEPA_API __declspec(dllexport)
#else
#  define JEPA_API __attribute__((visibility("default")))
#endif

/* ---- status and errors ------------------------------------------------------------------- */

typedef enum jepa_status {
    JEPA_OK               = 0,
    JEPA_ERR_INVALID_ARG  = 1, /* a NULL pointer, a wrong shape, a value out of range      */
    JEPA_ERR_BAD_FILE     = 2, /* the GGUF file is missing, truncated, forged or invalid   */
    JEPA_ERR_UNSUPPORTED  = 3, /* valid, but something this build cannot run (e.g. CUDA)  */
    JEPA_ERR_RESOURCE     = 4, /* out of memory, or over a configured limit                */
    JEPA_ERR_BACKEND      = 5  /* the compute backend failed                               */
} jepa_status;

/* The message of the calling thread's last failed call ("" when none). Valid until the
 * thread's next jepa call. */
JEPA_API const char * jepa_error_text(void);
/* The status of the calling thread's last failed call (JEPA_OK when none). */
JEPA_API jepa_status jepa_error_status(void);
/* The argument the calling thread's last failed call refused ("pixels", "tokens", "actions",
 * "states", "context_ids", ...), or "" when the failure was not one argument's (a bad file, memory). */
JEPA_API const char * jepa_error_param(void);
/* Clear the calling thread's error. */
JEPA_API void jepa_error_clear(void);

/* The library version, "MAJOR.MINOR.PATCH". */
JEPA_API const char * jepa_version(void);
/* The ggml version and commit this library was built with. */
JEPA_API const char * jepa_ggml_version(void);
/* 1 when built with the CUDA backend. */
JEPA_API int jepa_has_cuda(void);
/* The CPU threads this process may use, what n_threads <= 0 means: the CPUs of its affinity mask,
 * capped by its cgroup's CPU quota (cgroup v2 cpu.max, else v1 cpu.cfs_quota_us / cpu.cfs_period_us,
 * the tightest from its own cgroup up; quota / period rounded up), at least 1. Read on every call. */
JEPA_API int jepa_default_threads(void);
/* The CPU kernels this process runs, as a CPU model's info.matmul names them after "jepa: "
 * ("f32/f16: avx2-fma; bf16: avx2-fma; q8_0: avx2", "ggml", ...): the kernel path JEPA_GEMM names
 * (a row of the table below; unset: "native") on the CPU's features. f32 models give the same bits on
 * every path but ggml. */
JEPA_API const char * jepa_cpu_kernels(void);

/* ---- what the CPU can do ------------------------------------------------------------------
 * One place knows it: the features are detected once (x86: avx2 avx_vnni avx512 avx512_vnni
 * avx512_bf16 amx_bf16 amx_int8; ARM64: asimd asimddp), then masked by JEPA_CPU_FEATURES to stand
 * for a smaller CPU: a class (x86-64, x86-64-v3, alderlake, x86-64-v4, cascadelake, zen4,
 * sapphirerapids, armv8-a, armv8.2-a+dotprod, generic), feature names, or "native", joined by ','
 * (their union; "-name" removes). A mask never adds what the CPU lacks; an unknown name leaves no
 * feature at all (and is said on stderr), so a typo cannot pass for a larger CPU. docs/cpu.md. */

/* The features the engine runs with (masked), space-separated ("" for none). */
JEPA_API const char * jepa_cpu_features(void);
/* The features this CPU has, unmasked. */
JEPA_API const char * jepa_cpu_features_detected(void);
/* Every feature name the engine knows, space-separated (both architectures'). */
JEPA_API const char * jepa_cpu_feature_names(void);
/* JEPA_CPU_FEATURES as given ("" when unset), and why it was refused ("" when it was not). */
JEPA_API const char * jepa_cpu_features_mask(void);
JEPA_API const char * jepa_cpu_features_mask_error(void);

/* A CPU class of this build's architecture: its name (JEPA_CPU_FEATURES takes it), its features, the
 * CPUs it stands for; smallest first. */
typedef struct jepa_cpu_class {
    const char * name;
    const char * features;  /* space-separated, as jepa_cpu_features */
    const char * example;
} jepa_cpu_class;
JEPA_API int jepa_cpu_class_count(void);
/* Class i (0 <= i < count); JEPA_ERR_INVALID_ARG out of range or for a NULL out. */
JEPA_API jepa_status jepa_cpu_class_get(int i, jepa_cpu_class * out);

/* One row of the kernel-path table: a JEPA_GEMM value, the most each kernel kind may be on it, and
 * what this process's CPU (masked) runs under it. The rows are this build's architecture's, top
 * down, "native" (the default: the best the CPU has) first. */
typedef struct jepa_kernel_path {
    const char * name;        /* the JEPA_GEMM value                                        */
    const char * f32_cap;     /* the f32 / f16 kernel at most: avx512, avx2, neon, portable, ggml */
    const char * bf16_cap;    /* the bf16 kernel at most: avx512-bf16, or widen (to the f32 one) */
    const char * q8_cap;      /* the q8_0 product at most: avx512-vnni, avx-vnni, avx2, neon-dotprod, portable */
    int          amx;         /* 1: AMX tiles where the CPU has them (bf16 and q8_0)         */
    const char * stands_for;  /* the CPU it stands for                                       */
    const char * kernels;     /* what it runs on this CPU: a jepa_cpu_kernels line           */
    const char * f32;         /* ... kind by kind: the f32 / f16 kernel ("avx2-fma", "ggml")  */
    const char * bf16;        /* the bf16 kernel ("amx", "avx512-bf16", the f32 one, "ggml")  */
    const char * q8;          /* the q8_0 product ("amx-int8", "avx2", ..., "ggml")           */
    int          selected;    /* 1 for the row this process runs                             */
} jepa_kernel_path;
JEPA_API int jepa_kernel_path_count(void);
/* Row i (0 <= i < count); JEPA_ERR_INVALID_ARG out of range or for a NULL out. */
JEPA_API jepa_status jepa_kernel_path_get(int i, jepa_kernel_path * out);
/* The JEPA_GEMM values of the rows that run something else than this process's row and than each
 * other in the named kinds ("f32", "bf16", "q8", joined by ','; NULL or "": all three), space-separated
 * in table order: what a suite runs again on every other path after its plain run. ggml's row among
 * them only with with_ggml. NULL (and the error set) on an unknown kind. Valid until the thread's next
 * call of it. */
JEPA_API const char * jepa_kernel_paths_distinct(const char * kinds, int with_ggml);

/* ---- model ---------------------------------------------------------------------------------- */

typedef struct jepa_model jepa_model;

typedef enum jepa_device {
    JEPA_DEVICE_CPU  = 0,
    JEPA_DEVICE_CUDA = 1
} jepa_device;

typedef struct jepa_model_params {
    jepa_device device;       /* where the weights live and graphs run            */
    int         device_index; /* CUDA device ordinal (ignored on the CPU)         */
    int         use_mmap;     /* CPU: map the file and use in place every tensor the engine does
                                 not repack (default 1; processes share those pages). 0 reads
                                 every tensor into memory of the model's own. While mapped, the
                                 file must not be truncated or rewritten in place. */
} jepa_model_params;

JEPA_API jepa_model_params jepa_model_default_params(void);

/* Free and total bytes of a device as its backend reports them now. JEPA_ERR_INVALID_ARG naming
 * "device" for a CUDA device that does not exist, JEPA_ERR_UNSUPPORTED for CUDA in a build without it. */
JEPA_API jepa_status jepa_device_memory(jepa_device device, int index, size_t * free_bytes, size_t * total_bytes);

/* Load a GGUF file. NULL on error (see jepa_error_text). */
JEPA_API jepa_model * jepa_model_load(const char * path, const jepa_model_params * params);
JEPA_API void jepa_model_free(jepa_model * model);

typedef enum jepa_pos_type {
    JEPA_POS_NONE     = 0,
    JEPA_POS_LEARNED  = 1,
    JEPA_POS_SINCOS2D = 2,
    JEPA_POS_SINCOS3D = 3,
    JEPA_POS_ROPE3D   = 4
} jepa_pos_type;

typedef enum jepa_resize_mode {
    JEPA_RESIZE_SHORTEST_EDGE = 0, /* resize the short side to resize_short, centre-crop `crop` */
    JEPA_RESIZE_SQUASH        = 1  /* resize both sides to crop (aspect not kept)               */
} jepa_resize_mode;

typedef enum jepa_resample {
    JEPA_RESAMPLE_BILINEAR = 0,
    JEPA_RESAMPLE_BICUBIC  = 1
} jepa_resample;

/* The predictor a file holds (jepa.pred.kind). */
typedef enum jepa_pred_kind {
    JEPA_PRED_NONE   = 0,
    JEPA_PRED_MASKED = 1, /* V-JEPA 2's masked predictor: jepa_predict                            */
    JEPA_PRED_AC     = 2, /* V-JEPA 2-AC's action-conditioned predictor: jepa_world_*             */
    JEPA_PRED_LEWM   = 3  /* LeWM's action-conditioned predictor: jepa_world_*                    */
} jepa_pred_kind;

/* The head a file holds (jepa.head.kind). */
typedef enum jepa_head_kind {
    JEPA_HEAD_NONE           = 0,
    JEPA_HEAD_ATTENTIVE_POOL = 1  /* attentive pooling + linear classifier: jepa_classify            */
} jepa_head_kind;

/* How an item's tokens become one vector, for every modality (as llama.cpp's llama_pooling_type).
 * A text model's file names its own (jepa.text.pooling: cls, mean, last_token) and
 * jepa_encode_text pools with it; an image or video model's tokens are pooled by the caller
 * (jepa.pooling) from what jepa_encode returns. The values are the ones text files are read into. */
typedef enum jepa_pooling_type {
    JEPA_POOLING_NONE = 0, /* every token's vector, no pooling                                    */
    JEPA_POOLING_CLS  = 1, /* the first token's (the CLS token)                                    */
    JEPA_POOLING_MEAN = 2, /* the mean over the tokens (images and video: over the patch tokens)   */
    JEPA_POOLING_LAST = 3, /* the last token's (text)                                              */
    JEPA_POOLING_LEWM = 4, /* a LeWM file's embedding: the CLS through its projector
                              (jepa_world_latents)                                                 */
    JEPA_POOLING_LEVELS = 5 /* V-JEPA 2.1: the mean over the patch tokens of every output level side
                              by side (jepa_encode_levels), n_levels x embed_dim                   */
} jepa_pooling_type;

/* What a model is. Strings point into the model and live as long as it. */
typedef struct jepa_model_info {
    const char * name;          /* general.name                                        */
    const char * family;        /* jepa.family: hfvit, ijepa, levjepa, vjepa2, ...     */
    const char * modality;      /* image, video, image+video, text                     */
    const char * backend;       /* "CPU", "CUDA0", ...                                 */
    const char * matmul;        /* the weight-matrix kernels in use: "jepa: " + jepa_cpu_kernels()
                                   on the CPU ("jepa: f32/f16: avx2-fma; bf16: avx2-fma": the
                                   engine's own, batch-invariant, the same bits on every path) */
    int     n_matmul_packed;    /* weight matrices the engine's own kernels run (the rest: ggml) */
    int     file_type;          /* general.file_type (0 f32, 1 f16, ...)               */
    int64_t n_params;           /* number of weight elements                           */
    int64_t n_bytes;            /* bytes of weights on the backend                     */
    int64_t n_bytes_mapped;     /* of n_bytes: used in place from the mapped file      */

    /* encoder */
    int   embed_dim;
    int   n_layer;
    int   n_head;
    int   ffn_dim;
    int   patch_size;
    int   tubelet_size;         /* 1 for image models                                  */
    int   img_size;             /* native square input size                            */
    int   n_frames;             /* native clip length (1 for image models)             */
    int   in_chans;
    int   has_cls;
    int   n_registers;
    jepa_pos_type pos_type;
    float ln_eps;
    int   block_causal;         /* jepa.enc.attn_mode block_causal: a patch token attends the patches
                                   of its frame and earlier ones, a CLS every token (LeVJEPA); 0: full */
    int   n_levels;             /* jepa.enc.hier_layers: output levels jepa_encode_levels gives (V-JEPA
                                   2.1: 4); 0: one, the final norm's                                    */
    int   image_patch_embed;    /* a one-frame input (T = 1) takes its own tubelet-1 embedding
                                   (V-JEPA 2.1): a still image is encoded as one frame, not repeated */

    /* what else the file holds */
    jepa_head_kind head_kind;
    jepa_pred_kind pred_kind;
    int   n_labels;

    /* preprocessing recipe (jepa.pre.*) */
    float mean[3];
    float std[3];
    float rescale;              /* 1/255 by default                                    */
    int   resize_short;         /* shortest_edge mode: target of the short side        */
    int   crop;                 /* output square size                                  */
    jepa_resize_mode resize_mode;
    jepa_resample    resample;

    /* heads and predictors */
    int   n_classes;            /* classifier outputs (0: no head)                     */
    int   pred_embed_dim;       /* masked predictor width (0: no predictor)            */
    int   pred_n_layer;
    int   pred_n_head;
    int   pred_n_mask_tokens;
    int   pred_grid_size;       /* the native patch grid its token ids index           */
    int   pred_out_dim;         /* the width it predicts: embed_dim, or V-JEPA 2.1's own */
    int   pred_in_levels;       /* encoder levels its context tokens carry side by side (V-JEPA
                                   2.1 g/G: 4, tokens from jepa_encode_levels); 1 otherwise */
    int   pred_modality_embed;  /* jepa_predict_params.image applies (V-JEPA 2.1)          */
    int   pred_proj_context;    /* jepa_predict_params.context_out applies (V-JEPA 2.1)    */

    /* world models (pred_kind JEPA_PRED_AC or JEPA_PRED_LEWM) */
    int   pred_action_dim;      /* action width (ac: 7; lewm: frameskip x env dims)    */
    int   pred_state_dim;       /* ac: 7                                               */
    int   pred_n_frames;        /* lewm: the predictor's window; ac: upstream's frames */
    int   wm_embed_dim;         /* the latent width the world model's predictor takes (ac: embed_dim;
                                   lewm: the projector's output)                       */
    float pred_norm_reps_eps;   /* ac: eps of the latents' non-affine LayerNorm        */

    /* text models (family bert, modality "text"); 0 elsewhere */
    int   vocab_size;           /* token ids are in [0, vocab_size)                    */
    int   n_token_types;        /* token-type ids are in [0, n_token_types)            */
    int   n_positions;          /* rows of the position table                          */
    int   pos_offset;           /* position id of a sequence's first token             */
    int   max_tokens;           /* the longest sequence the engine takes (n_positions - pos_offset) */
    int   max_seq_len;          /* the tokenizer's truncation length (jepa.text.max_seq_len) */
    jepa_pooling_type pooling;  /* the file's pooling (jepa.text.pooling)              */
    int   text_normalize;       /* 1: the file's vectors are L2-normalised after pooling */
} jepa_model_info;

JEPA_API jepa_status jepa_model_get_info(const jepa_model * model, jepa_model_info * out);
/* Label i of the classifier head, or NULL when out of range. */
JEPA_API const char * jepa_model_label(const jepa_model * model, int i);
/* Tokens the encoder returns for one item [C, T, H, W] (CLS + registers + patches), or -1 with an
 * error (naming "pixels") when the shape is not valid for the model: the check jepa_encode makes. */
JEPA_API int64_t jepa_model_n_tokens(const jepa_model * model, int C, int T, int H, int W);

/* Whether the file the model maps changed since it was loaded (truncated, rewritten in place, or a
 * read of its mapping faulted): 1 with the reason in jepa_error_text(), 0 when it did not (or the
 * model maps nothing). Every call on a context of such a model fails with JEPA_ERR_BAD_FILE until the
 * file is loaded again; replace model files by rename, never in place. */
JEPA_API int jepa_model_file_changed(const jepa_model * model);

/* The tokenizer a text model carries (its tokenizer.json, verbatim), or NULL with an error when the
 * model is not a text model. Lives as long as the model. */
JEPA_API const char * jepa_model_tokenizer(const jepa_model * model);

/* ---- context ---------------------------------------------------------------------------- */

typedef struct jepa_context jepa_context;

/* The largest max_batch a context takes (items per graph). */
#define JEPA_MAX_BATCH_LIMIT 4096

typedef struct jepa_context_params {
    int     n_threads;        /* CPU threads per graph; <= 0: jepa_default_threads()         */
    int     max_batch;        /* items per graph, 1..JEPA_MAX_BATCH_LIMIT; bigger calls split */
    int     flash_attn;       /* -1 auto (flash everywhere), 0 off (ggml's matmul + softmax +
                                 matmul, the score matrix in the graph), 1 on. On a CPU with
                                 AVX-512, "flash" is the engine's own attention kernel       */
    int64_t max_graph_bytes;  /* compute-buffer cap: a call needing more is split or refused
                                 (0: no cap)                                                 */
    int64_t max_output_bytes; /* cap on one call's output: a call whose output would take more
                                 is refused (JEPA_ERR_RESOURCE naming "max_output_bytes")
                                 before any work. Default: a quarter of the machine's memory
                                 (or of its cgroup limit, if lower); 0: no cap               */
} jepa_context_params;

JEPA_API jepa_context_params jepa_context_default_params(void);

JEPA_API jepa_context * jepa_context_new(const jepa_model * model, const jepa_context_params * params);
JEPA_API void jepa_context_free(jepa_context * ctx);
JEPA_API jepa_status jepa_context_get_params(const jepa_context * ctx, jepa_context_params * out);
JEPA_API jepa_status jepa_context_set_threads(jepa_context * ctx, int n_threads);
JEPA_API jepa_status jepa_context_set_max_batch(jepa_context * ctx, int max_batch);
/* Whether a call's output of n_floats float32 values fits the context's max_output_bytes: JEPA_OK,
 * or JEPA_ERR_RESOURCE naming "max_output_bytes" (the message says `what` and both sizes). Every call
 * makes this check itself; a caller that allocates outputs from a request's shape asks first, so a
 * refused call allocates nothing. */
JEPA_API jepa_status jepa_context_check_output(const jepa_context * ctx, const char * what, int64_t n_floats);

/* Inputs: every float array a call takes (pixels, tokens, latents, actions, states) must be finite:
 * a NaN or infinity is refused with JEPA_ERR_INVALID_ARG naming the argument (a scan that costs
 * well under 1 % of a call; docs/fuzzing.md), where it would otherwise turn the output into NaN. */

/* Encode B items. pixels: float32 [B, C, T, H, W], C-contiguous, already normalised. For video
 * models T need not be a multiple of the tubelet size: the last frame repeats to fill the last
 * tubelet (upstream V-JEPA's rule), so T = 5 gives 3 tubelets.
 * out: float32 [B, n_tokens, embed_dim] (n_tokens = jepa_model_n_tokens(model, T, H, W)),
 * the final-norm tokens; out_len is its length in floats and must be at least that.
 * On the CPU the rows of an item do not depend on what else is in the batch (bit for bit). */
JEPA_API jepa_status jepa_encode(jepa_context * ctx, const float * pixels,
                                 int B, int C, int T, int H, int W,
                                 float * out, size_t out_len);

/* jepa_encode with every output level (info.n_levels > 0, V-JEPA 2.1's return_hierarchical): out is
 * float32 [B, n_tokens, n_levels * embed_dim], level k's norm at features [k*D, (k+1)*D), the last
 * level being what jepa_encode returns, bit for bit. JEPA_ERR_UNSUPPORTED for a one-level model. */
JEPA_API jepa_status jepa_encode_levels(jepa_context * ctx, const float * pixels,
                                        int B, int C, int T, int H, int W,
                                        float * out, size_t out_len);

/* The masked encoder (a RoPE encoder without prefix tokens: V-JEPA 2, 2.1): only the tokens at ids,
 * int32 [B, n_ids] on the input's token grid (T-major, then H, then W; each in [0, n_tokens)), go
 * through the blocks, each at its own position, as upstream's encoder(x, masks=ids). out: float32
 * [B, n_ids, width] in ids order, width = embed_dim, or n_levels x embed_dim with levels != 0.
 * JEPA_ERR_UNSUPPORTED for other encoders (named "ids"). */
JEPA_API jepa_status jepa_encode_masked(jepa_context * ctx, const float * pixels,
                                        int B, int C, int T, int H, int W,
                                        const int32_t * ids, int n_ids, int levels,
                                        float * out, size_t out_len);

/* Classify B items from their encoder tokens [B, N, D] (what jepa_encode returns; D = embed_dim)
 * with the model's attentive-pool head. logits_out: float32 [B, n_classes]; pooled_out: float32
 * [B, D], the head's pooled vector before the classifier, or NULL. Lengths are in floats. Softmax
 * and top-k are left to the caller. JEPA_ERR_UNSUPPORTED when the model has no head. */
/* The compute buffer, in bytes, one jepa_encode of pixels [B, C, T, H, W] takes on this context (a
 * batch over max_batch runs in chunks of max_batch; max_graph_bytes bounds this), measured without
 * computing: the memory per clip a caller budgets for. */
JEPA_API jepa_status jepa_encode_memory(jepa_context * ctx, int B, int C, int T, int H, int W, size_t * bytes);

JEPA_API jepa_status jepa_classify(jepa_context * ctx, const float * tokens, int B, int N, int D,
                                   float * logits_out, size_t logits_len,
                                   float * pooled_out, size_t pooled_len);

typedef struct jepa_predict_params {
    int mask_index;  /* which learned mask token fills the targets, mod n_mask_tokens (default 1,
                        as upstream's predictor)                                              */
    int grid_h;      /* the patch grid the token ids index: id = (t * grid_h + h) * grid_w + w;  */
    int grid_w;      /* 0: the model's native grid (info.pred_grid_size)                        */
    /* V-JEPA 2.1 predictors (info.pred_modality_embed / info.pred_proj_context; refused elsewhere): */
    int image;       /* 1: the tokens are an image's (its modality vector); 0: a clip's           */
    float * context_out;     /* NULL, or float32 [B, n_ctx, pred_out_dim]: the context rows through
                                the context projection (upstream's x_context), in context_ids order */
    size_t context_out_len;  /* its length in floats                                                */
} jepa_predict_params;

JEPA_API jepa_predict_params jepa_predict_default_params(void);

/* Run the masked predictor for B items. tokens: float32 [B, n_ctx, D], the encoder's tokens at the
 * context positions, in the order of context_ids (D = embed_dim x pred_in_levels: V-JEPA 2.1 g/G
 * reads jepa_encode_levels' tokens). context_ids: int32 [B, n_ctx] and target_ids: int32 [B, n_tgt],
 * token ids on the encoder grid (T-major, then H, then W). out: float32 [B, n_tgt, pred_out_dim],
 * the predictions for the targets in the order of target_ids. params may be NULL (defaults).
 * JEPA_ERR_UNSUPPORTED when the model has no predictor. */
JEPA_API jepa_status jepa_predict(jepa_context * ctx, const float * tokens, int B, int n_ctx, int D,
                                  const int32_t * context_ids, const int32_t * target_ids, int n_tgt,
                                  const jepa_predict_params * params, float * out, size_t out_len);

/* Encode n_seq token sequences of a text model, laid end to end with no padding: ids and type_ids
 * (NULL: all 0) are int32 [n_tok], n_tok = the sum of seq_len [n_seq]. The dense layers run on all
 * tokens at once and the attention per sequence, so on the CPU a sequence's result is bit for bit the
 * same whatever else is in the call. pool JEPA_POOLING_NONE: out [n_tok, embed_dim], every token's
 * final hidden state; CLS, MEAN or LAST: out [n_seq, embed_dim], pooled, then L2-normalised when
 * normalize != 0 (JEPA_POOLING_LEWM is not a text pooling: refused, naming "pool").
 * Ids out of range, an empty sequence or one longer than max_tokens are refused (JEPA_ERR_INVALID_ARG
 * naming "ids", "type_ids" or "seq_len"); JEPA_ERR_UNSUPPORTED for a model that is not a text model. */
JEPA_API jepa_status jepa_encode_text(jepa_context * ctx, const int32_t * ids, const int32_t * type_ids,
                                      const int32_t * seq_len, int n_seq, jepa_pooling_type pool, int normalize,
                                      float * out, size_t out_len);

/* ---- world models (docs/world-models.md) ---------------------------------------------------- */
/* One pair of entries for every world model, tagged by its predictor kind: the next world model
 * adds a kind and its rules here, not a new function. */

/* The latents a world model's predictor takes, from encoder tokens [B, N, E] (what jepa_encode
 * returns; E = embed_dim).
 *   JEPA_PRED_AC:   every token through the non-affine LayerNorm (eps pred_norm_reps_eps, float64
 *                   arithmetic as upstream's) -> out [B, N, E];
 *   JEPA_PRED_LEWM: the CLS token through the projector -> out [B, 1, wm_embed_dim].
 * out_len is in floats. */
JEPA_API jepa_status jepa_world_latents(jepa_context * ctx, const float * tokens, int B, int N, int E,
                                        float * out, size_t out_len);

typedef struct jepa_world_input {
    jepa_pred_kind kind;    /* the model's pred_kind (checked): JEPA_PRED_AC or JEPA_PRED_LEWM        */
    int B;                  /* items                                                                */
    int T;                  /* time steps (lewm: at most pred_n_frames)                             */
    int P;                  /* latent rows per step: ac: pred_grid_size^2 tokens of a frame; lewm: 1 */
    int D;                  /* latent width: wm_embed_dim                                           */
    const float * latents;  /* [B, T*P, D], step-major: what jepa_world_latents returns, per step   */
    int A;                  /* action width: must be pred_action_dim                                */
    int S;                  /* state width: pred_state_dim for ac; 0 for lewm                       */
    const float * actions;  /* [B, T, A]                                                            */
    const float * states;   /* [B, T, S] for ac; NULL for lewm                                      */
} jepa_world_input;

typedef struct jepa_world_output {
    float * pred;     /* [B, T*P, D]: row block t predicts step t + 1                               */
    float * raw;      /* lewm: [B, T*P, D] before the predictor's projector, or NULL; ac: NULL       */
    float * act_emb;  /* lewm: [B, T, D] the action embedder's output, or NULL; ac: NULL             */
    size_t  len;      /* floats in each buffer given                                                */
} jepa_world_output;

/* One predictor pass of the world model. JEPA_ERR_UNSUPPORTED when in->kind is not the model's. */
JEPA_API jepa_status jepa_world_predict(jepa_context * ctx, const jepa_world_input * in,
                                        const jepa_world_output * out);

/* A whole rollout of B candidates from one context frame, H steps, as upstream's V-JEPA 2-AC rollout
 * runs them on jepa_world_predict: step h runs the predictor on frames 0 .. h (frame 0 the context,
 * frame j > 0 step j - 1's prediction) with actions[:, 0 .. h] and states[:, 0 .. h], and its last row
 * block through the non-affine LayerNorm (jepa_world_latents' arithmetic) is frame h + 1. */
typedef struct jepa_world_rollout_input {
    jepa_pred_kind kind;    /* JEPA_PRED_AC, the model's pred_kind (a lewm window slides, so its rollouts
                               run over jepa_world_predict: JEPA_ERR_UNSUPPORTED)                     */
    int B;                  /* candidates                                                           */
    int H;                  /* steps                                                                */
    int P;                  /* latent rows per frame: pred_grid_size^2                              */
    int D;                  /* latent width: wm_embed_dim                                           */
    const float * context;  /* [P, D]: the current frame's latents (jepa_world_latents), shared by
                               every candidate                                                      */
    int A;                  /* action width: pred_action_dim                                        */
    int S;                  /* state width: pred_state_dim                                          */
    const float * actions;  /* [B, H, A]                                                            */
    const float * states;   /* [B, H, S]: the robot state at each step (the pose chain of the actions
                               from the current state, which does not depend on the predictions)   */
} jepa_world_rollout_input;

typedef struct jepa_world_rollout_params {
    int cache;  /* 1 (default): V-JEPA 2-AC's predictor is frame-causal, so a step keeps each layer's keys
                   and values per candidate and computes only the new frame's block (H blocks of
                   2 + P tokens per candidate instead of H (H + 1) / 2); the cache holds
                   2 x pred_n_layer x (H - 1) x (2 + P) x pred_embed_dim floats per candidate, for
                   the candidates of one graph at a time (max_batch, fewer where the cache and the
                   step's compute buffer together would pass max_graph_bytes). On the CPU's own
                   kernels (f32 / f16 weights, flash attention: the defaults) it gives the bits of
                   cache = 0, which recomputes every prefix as upstream does.                    */
} jepa_world_rollout_params;

JEPA_API jepa_world_rollout_params jepa_world_rollout_default_params(void);

/* out: [B, H, P, D], frame h + 1 (the normalised prediction of step h) at [:, h]; out_len in floats.
 * params may be NULL (defaults). Refusals name the argument as jepa_world_predict's do. */
JEPA_API jepa_status jepa_world_rollout(jepa_context * ctx, const jepa_world_rollout_input * in,
                                        const jepa_world_rollout_params * params, float * out, size_t out_len);

/* ---- quantization (jepa-quantize, docs/quantize.md) ----------------------------------------- */
/* ggml's own conversion of float32 weight rows to a storage type. type: "f16", "bf16", "q8_0", "q6_k",
 * "q5_k", "q5_0", "q4_k" or "q4_0"; or "i8c", the project's own: int8 with one float32 scale per row
 * (amax / 127), a row's bytes being its n_per_row int8 values then its scale (a file stores the values
 * as the i8 tensor <prefix>.weight and the scales as <prefix>.weight_scale, docs/gguf.md); rows of a
 * multiple of 16 values up to 65536, finite. */

/* The ggml type id of `type` (what a GGUF tensor records), or -1 with an error naming "type". */
JEPA_API int jepa_type_id(const char * type);
/* Bytes one row of n_per_row values takes in `type`, or -1 with an error: JEPA_ERR_UNSUPPORTED when
 * the type's blocks do not divide the row (k-quants pack 256 values, the others 32). */
JEPA_API int64_t jepa_type_row_bytes(const char * type, int64_t n_per_row);
/* Quantize src [n_rows, n_per_row] (float32, row-major) into dst (n_rows x jepa_type_row_bytes). */
JEPA_API jepa_status jepa_quantize(const char * type, const float * src, int64_t n_rows, int64_t n_per_row,
                                   void * dst, size_t dst_len);

#ifdef __cplusplus
}
#endif

#endif /* JEPA_H */
