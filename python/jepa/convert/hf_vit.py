"""HF transformers ViTModel ("vit", family hfvit) and IJepaModel ("ijepa", family ijepa) checkpoints:
config.json + safetensors exactly as save_pretrained writes them.

transformers 5 names the modules `layers.{i}.attention.q_proj` in memory but still saves the legacy
names (`encoder.layer.{i}.attention.attention.query`); both are read. Task models prefix the
backbone with `vit.` / `ijepa.`. Deliberately left out: the pooler (`pooler.dense.*`, tanh(Linear)
of the CLS token, not part of the token encoder) and `embeddings.mask_token` (masked-image training
only). Anything else unmapped, such as a classifier, is an error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..gguf.schema import Encoder, Preprocess
from .base import Config, Converter, beside, read_json, register
from .preprocess import load_recipe
from .recipes import HF_VIT_RECIPE
from .source import TensorSource, safetensors_files

_ACTS = {"gelu": "gelu_erf", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh"}

# GGUF block tensor -> its source module, legacy (as saved) then transformers 5 in-memory names.
_BLOCK: dict[str, tuple[str, ...]] = {
    "ln1": ("encoder.layer.{i}.layernorm_before", "layers.{i}.layernorm_before"),
    "attn_q": ("encoder.layer.{i}.attention.attention.query", "layers.{i}.attention.q_proj"),
    "attn_k": ("encoder.layer.{i}.attention.attention.key", "layers.{i}.attention.k_proj"),
    "attn_v": ("encoder.layer.{i}.attention.attention.value", "layers.{i}.attention.v_proj"),
    "attn_out": ("encoder.layer.{i}.attention.output.dense", "layers.{i}.attention.o_proj"),
    "ln2": ("encoder.layer.{i}.layernorm_after", "layers.{i}.layernorm_after"),
    "ffn_up": ("encoder.layer.{i}.intermediate.dense", "layers.{i}.mlp.fc1"),
    "ffn_down": ("encoder.layer.{i}.output.dense", "layers.{i}.mlp.fc2"),
}
_SKIPPED = ("pooler.dense.weight", "pooler.dense.bias", "embeddings.mask_token")


def hf_block(src: TensorSource, prefix: str, i: int, qkv_bias: bool) -> Iterator[tuple[str, np.ndarray]]:
    """Encoder block i of an HF ViT whose modules sit under `prefix` (LeWM's "encoder."), under either
    naming; every bias is required but q/k/v's without qkv_bias."""
    for dst, names in _BLOCK.items():
        module = src.first([prefix + n.format(i=i) for n in names])
        bias = qkv_bias or dst not in ("attn_q", "attn_k", "attn_v")
        yield from src.linear(f"enc.blk.{i}.{dst}", module, bias)


def hf_encoder(src: TensorSource, prefix: str, n_layer: int, qkv_bias: bool,
               has_cls: bool = True) -> Iterator[tuple[str, np.ndarray]]:
    """A whole HF ViTModel whose modules sit under `prefix` ("" here, "encoder." in LeWM's state dict)."""
    w = src.take(f"{prefix}embeddings.patch_embeddings.projection.weight")
    yield "enc.patch_embed.weight", w.reshape(w.shape[0], -1)  # [D, C, P, P] -> [D, C*P*P]
    yield "enc.patch_embed.bias", src.take(f"{prefix}embeddings.patch_embeddings.projection.bias")
    if has_cls:
        yield "enc.cls_token", src.take(f"{prefix}embeddings.cls_token").reshape(-1)
    pos = src.take(f"{prefix}embeddings.position_embeddings")
    yield "enc.pos_embed", pos.reshape(-1, pos.shape[-1])
    for i in range(n_layer):
        yield from hf_block(src, prefix, i, qkv_bias)
    yield from src.linear("enc.norm", f"{prefix}layernorm", bias=True)
    for name in _SKIPPED:
        if src.has(prefix + name):
            src.skip(prefix + name)


@register
class HFViTModel(Converter):
    """transformers.ViTModel: CLS token with a position slot, LayerNorm eps 1e-12 by default."""

    family = "hfvit"
    model_type = "vit"
    has_cls = True

    @classmethod
    def detect(cls, src: Path) -> bool:
        cfg = read_json(beside(src, "config.json"))
        return cfg is not None and cfg.get("model_type") == cls.model_type

    def open_source(self) -> TensorSource:
        cfg = read_json(beside(self.src, "config.json"))
        if cfg is None:
            raise ValueError(f"{self.src}: no config.json (an HF checkpoint directory is expected)")
        if cfg.get("model_type") != self.model_type:
            raise ValueError(f"{cfg.path}: unsupported model_type={cfg.get('model_type')} for family "
                             f"{self.family}")
        self.config: Config = cfg
        return TensorSource(safetensors_files(self.src), prefixes=(f"{self.model_type}.",))

    def hparams(self) -> Encoder:
        c = self.config
        act = c.choice("hidden_act", _ACTS, "gelu")
        return Encoder(
            embed_dim=c.integer("hidden_size", lo=1),
            n_layer=c.integer("num_hidden_layers", lo=1),
            n_head=c.integer("num_attention_heads", lo=1),
            ffn_dim=c.integer("intermediate_size", lo=1),
            patch_size=c.square("patch_size", 16),
            img_size=c.square("image_size", 224),
            in_chans=c.integer("num_channels", 3, lo=1),
            ln_eps=c.number("layer_norm_eps", 1e-12),
            act=_ACTS[act],
            cls_token=self.has_cls,
        )

    def preprocess(self) -> Preprocess:
        return load_recipe(self.src, self.hparams(), HF_VIT_RECIPE, "config.json's image_size")

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        qkv_bias = self.config.flag("qkv_bias", True)
        return hf_encoder(self.source, "", self.hparams().n_layer, qkv_bias, self.has_cls)


@register
class HFIJepaModel(HFViTModel):
    """transformers.IJepaModel: no CLS token; positions (fixed sincos upstream) stored as a table."""

    family = "ijepa"
    model_type = "ijepa"
    has_cls = False
