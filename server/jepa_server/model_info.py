"""The model as /info publishes it: an explicit shape, field by field (docs/serving.md, "GET /info").

Built from jepa.ModelInfo by name, so a field the engine adds is not published until it is chosen
here, and a renamed one fails the server's tests instead of changing the API silently. Enums go out
as the strings the GGUF file spells them ("masked", "attentive_pool", "rope3d", "bicubic")."""

from __future__ import annotations

from typing import Any

import jepa

from .metrics import TextStats

# Published as they are (ints, floats, strings, bools).
FIELDS = (
    "name", "family", "modality", "backend", "matmul", "n_matmul_packed", "file_type", "n_params",
    "n_bytes", "embed_dim", "n_layer", "n_head", "ffn_dim", "patch_size", "tubelet_size", "img_size",
    "n_frames", "in_chans", "has_cls", "n_registers", "ln_eps", "n_levels", "image_patch_embed",
    "n_labels", "n_classes", "pred_embed_dim", "pred_n_layer", "pred_n_head", "pred_n_mask_tokens",
    "pred_grid_size", "pred_action_dim", "pred_state_dim", "pred_n_frames", "wm_embed_dim",
    "pred_norm_reps_eps",
)
# Published as the file's lower-case spelling.
ENUMS = ("pos_type", "head_kind", "pred_kind")
_SPELLING = {jepa.HeadKind.ATTENTIVE_POOL: "attentive_pool"}


def spelling(value: Any) -> str:
    """An engine enum as the file spells it ("none" for the NONE members)."""
    return _SPELLING.get(value, value.name.lower())


def pool_json(model: jepa.Model) -> dict[str, Any]:
    """The model's own pool modes and its default (/health, /info): only modes it accepts."""
    return {"default": jepa.default_pool(model), "modes": list(jepa.pool_modes(model))}


def model_json(model: jepa.Model) -> dict[str, Any]:
    """/info's "model" object (without the server's id, file and dtype)."""
    info = model.info
    out: dict[str, Any] = {name: getattr(info, name) for name in FIELDS}
    out.update({name: spelling(getattr(info, name)) for name in ENUMS})
    out["attn_mode"] = "block_causal" if info.block_causal else "full"  # jepa.enc.attn_mode's spelling
    out["pool"] = pool_json(model)
    if info.modality == "text":  # tokens in: no pixel recipe to publish (its "text" block says the rest)
        return out
    pre = info.preprocess
    out["preprocess"] = {
        "mean": list(pre.mean),
        "std": list(pre.std),
        "rescale": pre.rescale,
        "resize_short": pre.resize_short,
        "crop": pre.crop,
        "resize_mode": spelling(pre.resize_mode),
        "resample": spelling(pre.resample),
    }
    return out


def text_json(model: jepa.Model, stats: TextStats) -> dict[str, Any]:
    """/info's text block of a text model (its tokenizer's bounds, its pooling, the counters since it
    loaded); nothing for the others."""
    info = model.info
    if info.modality != "text":
        return {}
    return {
        "text": {
            "vocab_size": info.vocab_size,
            "max_seq_len": info.max_seq_len,
            "pooling": jepa.default_pool(model),
            "normalize": bool(info.text_normalize),
            "texts": stats.texts,
            "tokens": stats.tokens,
            "truncated": stats.truncated,
        }
    }
