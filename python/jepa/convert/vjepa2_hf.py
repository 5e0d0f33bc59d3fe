"""HF transformers `VJEPA2Model` / `VJEPA2ForVideoClassification` checkpoints (config.json + safetensors
as save_pretrained writes them; the video processor's config when present).

`VJEPA2Model` holds `encoder.*` and `predictor.*`; the classifier nests that model under `vjepa2.` and
adds `pooler.*` (the attentive pool) and `classifier.*`. The Conv3d tubelet weight [D, C, t, P, P] is
5-D and ggml tensors have at most 4 dims: it is flattened to [D, C*t*P*P] (C, t, y, x order, what the
engine's patchify produces). The predictor's mask tokens [n, 1, 1, Dp] become [n, Dp]; the pooler's
query [1, 1, D] becomes [1, D]. Everything in the file is mapped; anything else is an error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..gguf.schema import Encoder, Preprocess
from .base import Config, beside, read_json
from .preprocess import load_recipe
from .recipes import vjepa2_recipe
from .source import TensorSource, safetensors_files
from .vjepa2_parts import HeadSpec, PredictorSpec

_ACTS = {"gelu": "gelu_erf"}
# Engine block tensor -> source module, for encoder / predictor layers and the pooler's self-attention.
_LAYER = {
    "ln1": "norm1",
    "attn_q": "attention.query",
    "attn_k": "attention.key",
    "attn_v": "attention.value",
    "attn_out": "attention.proj",
    "ln2": "norm2",
    "ffn_up": "mlp.fc1",
    "ffn_down": "mlp.fc2",
}
_POOL_LAYER = {
    "ln1": "layer_norm1",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_out": "self_attn.out_proj",
    "ln2": "layer_norm2",
    "ffn_up": "mlp.fc1",
    "ffn_down": "mlp.fc2",
}
_XATTN = {
    "ln_kv": "layer_norm1",
    "q": "cross_attn.q_proj",
    "k": "cross_attn.k_proj",
    "v": "cross_attn.v_proj",
    "ln2": "layer_norm2",
    "ffn_up": "mlp.fc1",
    "ffn_down": "mlp.fc2",
}


def detect(src: Path) -> bool:
    cfg = read_json(beside(src, "config.json"))
    return cfg is not None and cfg.get("model_type") == "vjepa2"


def _labels(cfg: Config, n: int) -> tuple[str, ...]:
    """id2label in index order (config.json keys are strings); LABEL_i where it has none."""
    id2label = {str(k): str(v) for k, v in cfg.section("id2label").items()}
    return tuple(id2label.get(str(i), f"LABEL_{i}") for i in range(n))


class HFLayout:
    def __init__(self, src: Path) -> None:
        cfg = read_json(beside(src, "config.json"))
        if cfg is None or cfg.get("model_type") != "vjepa2":
            raise ValueError(f"{src}: no config.json with model_type vjepa2")
        self.src = src
        self.config: Config = cfg
        self.source = TensorSource(safetensors_files(src), prefixes=("vjepa2.",))
        cfg.choice("hidden_act", _ACTS, "gelu")

    # -- hparams --------------------------------------------------------------------------------

    def encoder(self) -> Encoder:
        c, s = self.config, self.source
        d, chans, t, p, p2 = s.shape("encoder.embeddings.patch_embeddings.proj.weight")
        if p != p2 or p != c.square("patch_size", 16):
            raise ValueError(f"{c.path}: unsupported patch_size={c.get('patch_size')} (weight {[p, p2]})")
        return Encoder(
            embed_dim=d,
            n_layer=c.integer("num_hidden_layers", lo=1),
            n_head=c.integer("num_attention_heads", lo=1),
            ffn_dim=s.shape("encoder.layer.0.mlp.fc1.weight")[0],
            patch_size=p,
            img_size=c.integer("crop_size", 256, lo=1),
            in_chans=chans,
            ln_eps=c.number("layer_norm_eps", 1e-6),
            act=_ACTS[c.choice("hidden_act", _ACTS, "gelu")],
            cls_token=False,
            pos_type="rope3d",
            tubelet_size=t,
            n_frames=c.integer("frames_per_clip", 64, lo=1),
        )

    def predictor(self) -> PredictorSpec | None:
        c, s = self.config, self.source
        if not s.has("predictor.embeddings.mask_tokens"):
            return None
        return PredictorSpec(
            embed_dim=c.integer("pred_hidden_size", lo=1),
            n_layer=c.integer("pred_num_hidden_layers", lo=1),
            n_head=c.integer("pred_num_attention_heads", lo=1),
            ffn_dim=s.shape("predictor.layer.0.mlp.fc1.weight")[0],
            n_mask_tokens=s.shape("predictor.embeddings.mask_tokens")[0],
            out_dim=c.integer("hidden_size", lo=1),
            grid_size=c.integer("crop_size", 256, lo=1) // c.square("patch_size", 16),
            n_frames=c.integer("frames_per_clip", 64, lo=1),
            ln_eps=c.number("layer_norm_eps", 1e-6),
        )

    def head(self) -> HeadSpec | None:
        s = self.source
        if not s.has("pooler.query_tokens"):
            return None
        n_classes = s.shape("classifier.weight")[0]
        n_pool = s.count("pooler.self_attention_layers.{i}.layer_norm1.weight")
        return HeadSpec(
            embed_dim=self.config.integer("hidden_size", lo=1),
            n_pool_layers=n_pool,
            ffn_dim=s.shape("pooler.cross_attention_layer.mlp.fc1.weight")[0],
            labels=_labels(self.config, n_classes),
        )

    def preprocess(self) -> Preprocess:
        enc = self.encoder()
        return load_recipe(self.src, enc, vjepa2_recipe(enc.img_size), "config.json's crop_size",
                           ("video_preprocessor_config.json", "preprocessor_config.json"))

    # -- tensors --------------------------------------------------------------------------------

    def _layers(self, dst: str, src: str, names: dict[str, str], n: int) -> Iterator[tuple[str, np.ndarray]]:
        for i in range(n):
            for d, s in names.items():
                yield from self.source.linear(f"{dst}.{i}.{d}", f"{src}.{i}.{s}")

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        enc, s = self.encoder(), self.source
        w = s.take("encoder.embeddings.patch_embeddings.proj.weight")
        yield "enc.patch_embed.weight", w.reshape(w.shape[0], -1)  # [D, C, t, P, P] -> [D, C*t*P*P]
        bias = s.take_optional("encoder.embeddings.patch_embeddings.proj.bias")
        if bias is not None:
            yield "enc.patch_embed.bias", bias
        yield from self._layers("enc.blk", "encoder.layer", _LAYER, enc.n_layer)
        yield from self.source.linear("enc.norm", "encoder.layernorm")

        pred = self.predictor()
        if pred is not None:
            yield from self.source.linear("pred.embed", "predictor.embeddings.predictor_embeddings")
            mask_tokens = s.take("predictor.embeddings.mask_tokens")  # [n, 1, 1, Dp]
            yield "pred.mask_tokens", mask_tokens.reshape(pred.n_mask_tokens, -1)
            yield from self._layers("pred.blk", "predictor.layer", _LAYER, pred.n_layer)
            yield from self.source.linear("pred.norm", "predictor.layernorm")
            yield from self.source.linear("pred.proj", "predictor.proj")

        head = self.head()
        if head is not None:
            yield "head.query", s.take("pooler.query_tokens").reshape(1, -1)
            pool = "pooler.self_attention_layers"
            yield from self._layers("head.blk", pool, _POOL_LAYER, head.n_pool_layers)
            for d, src in _XATTN.items():
                yield from self.source.linear(f"head.xattn.{d}", f"pooler.cross_attention_layer.{src}")
            yield from self.source.linear("head.cls", "classifier")
