"""LeVJEPA video encoders (family levjepa, modality video) in their Hugging Face layout: the
galilai-group/LeVJEPA-VideoMix-Large directory, `model.safetensors` with MLO-lab/LeVJEPA's
`VisionTransformer` under `encoder.` and a `config.json` with model_type levjepa.

The network (module.py at MLO-lab/LeVJEPA 481a99b): a Conv3d tubelet of one frame (1, P, P), a CLS token
prepended after it, no position table but V-JEPA 2's tiled 3-D RoPE on the patch tokens (t counts
frames), block-causal attention (`attn_mode`), pre-LN blocks (eps 1e-6, fused qkv with bias, exact
GELU), the final norm on every token. Its shapes come from the tensors; the head count and the native
clip from config.json, whose field names are the training code's (embed_dim, depth, num_heads, ...) or
transformers' usual ones (hidden_size, num_hidden_layers, ...). Every field is known or refused: an
unknown one may change the network (the counter-example is vjepa2's **kwargs that swallow `use_SiLU`).
The LeJEPA image release of the same family is timm_vit.py's layout; detection tells them apart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..gguf.schema import ATTN_MODES, Encoder, Preprocess
from .base import Config, Converter, beside, read_json, register
from .preprocess import load_recipe
from .recipes import LEVJEPA_RECIPE, levjepa_encoder
from .source import TensorSource, safetensors_files
from .timm_vit import TIMM_BLOCK

MODEL_TYPE = "levjepa"
PREFIX = "encoder."

# Every field that says something about the network: its spellings, the training code's first. Two
# spellings of one field must agree.
SPELLINGS: dict[str, tuple[str, ...]] = {
    "embed_dim": ("embed_dim", "hidden_size"),
    "depth": ("depth", "num_hidden_layers"),
    "num_heads": ("num_heads", "num_attention_heads"),
    "mlp_ratio": ("mlp_ratio",),
    "ffn_dim": ("intermediate_size", "mlp_dim"),
    "patch_size": ("patch_size",),
    "tubelet_size": ("tubelet_size",),
    "in_chans": ("in_chans", "num_channels"),
    "img_size": ("img_size", "image_size", "crop_size"),
    "num_frames": ("num_frames", "frames_per_clip"),
    "attn_mode": ("attn_mode", "attention_mode"),
    "use_rope": ("use_rope",),
    "qkv_bias": ("qkv_bias",),
    "ln_eps": ("layer_norm_eps", "norm_eps"),
    "act": ("hidden_act",),
    "qk_scale": ("qk_scale",),
    "out_layers": ("out_layers",),
    "use_silu": ("use_silu", "use_SiLU"),
}
# Fields that change nothing at inference: the training code's regularisers, initialisers and kernels
# (token drop runs only in training), and what transformers writes into every config.json.
IGNORED = frozenset({
    "drop_rate", "attn_drop_rate", "drop_path_rate", "hidden_dropout_prob", "attention_probs_dropout_prob",
    "token_drop_rate", "token_drop_mode", "token_drop_k", "init_std", "initializer_range", "uniform_power",
    "use_sdpa", "use_activation_checkpointing",
    "model_type", "architectures", "auto_map", "torch_dtype", "dtype", "transformers_version",
    "_name_or_path", "name_or_path", "return_dict", "output_hidden_states", "output_attentions",
    "torchscript", "use_bfloat16", "pruned_heads", "tie_word_embeddings", "chunk_size_feed_forward",
    "is_encoder_decoder", "is_decoder", "add_cross_attention", "id2label", "label2id", "problem_type",
})
_ACTS = {"gelu": "gelu_erf"}


class Fields:
    """config.json read by field: each field under whichever of its spellings the file uses, refusals
    naming that spelling, and every other key refused unless it is known to change nothing."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._key: dict[str, str] = {}
        for field, names in SPELLINGS.items():
            present = [n for n in names if cfg.get(n) is not None]
            if len({repr(cfg[n]) for n in present}) > 1:
                shown = " and ".join(f"{n}={cfg[n]!r}" for n in present)
                raise ValueError(f"{cfg.path}: {shown} disagree (two spellings of one field)")
            if present:
                self._key[field] = present[0]
        known = {n for names in SPELLINGS.values() for n in names} | IGNORED
        unknown = sorted(k for k in cfg if k not in known)
        if unknown:
            raise ValueError(f"{cfg.path}: unsupported field {unknown[0]}={cfg[unknown[0]]!r}: not a setting "
                             "of the LeVJEPA encoder this converter knows, and it may change the network")

    def key(self, field: str) -> str:
        """The spelling the file uses (the first one when it has none)."""
        return self._key.get(field, SPELLINGS[field][0])

    def has(self, field: str) -> bool:
        return field in self._key

    def integer(self, field: str) -> int | None:
        """A positive integer, None when the file does not set the field."""
        return self.cfg.integer(self.key(field), lo=1) if self.has(field) else None

    def require(self, field: str, value: Any, why: str) -> None:
        """Refuse a field set to anything but `value` (absent is fine: the network's own default)."""
        if self.has(field) and self.cfg[self.key(field)] != value:
            k = self.key(field)
            raise ValueError(f"{self.cfg.path}: unsupported {k}={self.cfg[k]!r} ({why})")


@register
class LeVJEPAHF(Converter):
    """Family levjepa's video layout: MLO-lab's `VisionTransformer` under `encoder.`, recognised by the
    config.json beside it (model_type levjepa). The family's image layout is TimmViT."""

    family = "levjepa"
    modality = "video"

    @classmethod
    def detect(cls, src: Path) -> bool:
        cfg = read_json(beside(src, "config.json"))
        return cfg is not None and cfg.get("model_type") == MODEL_TYPE

    def open_source(self) -> TensorSource:
        cfg = read_json(beside(self.src, "config.json"))
        if cfg is None or cfg.get("model_type") != MODEL_TYPE:
            raise ValueError(f"{self.src}: no config.json with model_type {MODEL_TYPE}")
        self.fields = Fields(cfg)
        return TensorSource(safetensors_files(self.src), prefixes=(PREFIX,))

    # -- hparams --------------------------------------------------------------------------------

    def _check_fixed(self) -> None:
        f = self.fields
        f.require("use_rope", True, "the released encoder uses 3-D RoPE; a learned position table is "
                  "not this layout")
        f.require("qkv_bias", True, "the engine's fused qkv has a bias")
        f.require("tubelet_size", 1, "LeVJEPA's tubelet is one frame")
        f.require("qk_scale", None, "only the default head_dim^-0.5 attention scale")
        f.require("out_layers", None, "the encoder's output is its last layer")
        f.require("use_silu", False, "the MLP is GELU")
        if f.has("act"):
            f.cfg.choice(f.key("act"), _ACTS)

    def _attn_mode(self) -> str:
        f = self.fields
        if not f.has("attn_mode"):
            raise ValueError(f"{f.cfg.path}: attn_mode is missing ({' or '.join(ATTN_MODES)}: the release "
                             "is block_causal, the training code's default full); add it to config.json")
        return f.cfg.choice(f.key("attn_mode"), ATTN_MODES)

    def _agree(self, field: str, found: int | None, want: int, what: str) -> None:
        if found is not None and found != want:
            k = self.fields.key(field)
            raise ValueError(f"{self.fields.cfg.path}: {k}={found} disagrees with the tensors ({what})")

    def hparams(self) -> Encoder:
        f, s = self.fields, self.source
        self._check_fixed()
        w = s.shape("patch_embed.proj.weight")
        if len(w) != 5:
            raise ValueError(f"unsupported patch_embed.proj.weight shape={list(w)} (a Conv3d [D, C, 1, P, P] "
                             "is expected: the video layout)")
        d, chans, t, p, p2 = w
        if p != p2:
            raise ValueError(f"unsupported patch_size={[p, p2]} (only square patches)")
        if t != 1:
            raise ValueError(f"unsupported tubelet_size={t} (patch_embed.proj.weight {list(w)}; LeVJEPA's "
                             "tubelet is one frame)")
        cls_shape = s.shape("cls_token")
        if cls_shape != (1, 1, d):
            raise ValueError(f"cls_token: got {list(cls_shape)}, expected [1, 1, {d}]")
        n_layer = s.count("blocks.{i}.norm1.weight")
        if n_layer == 0:
            raise ValueError(f"missing source tensor {PREFIX + 'blocks.0.norm1.weight'!r}")
        ffn = s.shape("blocks.0.mlp.fc1.weight")[0]
        self._agree("embed_dim", f.integer("embed_dim"), d, f"cls_token is {d} wide")
        self._agree("depth", f.integer("depth"), n_layer, f"{n_layer} blocks")
        self._agree("patch_size", f.integer("patch_size"), p, f"patch_embed.proj.weight {list(w)}")
        self._agree("in_chans", f.integer("in_chans"), chans, f"patch_embed.proj.weight {list(w)}")
        self._agree("ffn_dim", f.integer("ffn_dim"), ffn, f"blocks.0.mlp.fc1.weight is {ffn} wide")
        if f.has("mlp_ratio"):
            ratio = f.cfg.number(f.key("mlp_ratio"))
            if ratio * d != ffn:
                raise ValueError(f"{f.cfg.path}: mlp_ratio={ratio:g} disagrees with the tensors "
                                 f"(blocks.0.mlp.fc1.weight is {ffn} wide, {d} x {ratio:g} = {ratio * d:g})")
        n_head = f.integer("num_heads")
        if n_head is None:
            raise ValueError(f"{f.cfg.path}: num_heads is missing (the head count; shapes cannot tell it)")
        hd = d // n_head if d % n_head == 0 else 0
        if hd < 6 or hd % 2:
            raise ValueError(f"{f.cfg.path}: unsupported {f.key('num_heads')}={n_head} (embed_dim {d}: 3-D "
                             "RoPE needs an even head width of at least 6)")
        img = f.cfg.square(f.key("img_size"), 224) if f.has("img_size") else 224
        frames = f.integer("num_frames") or 16
        return levjepa_encoder(d, n_layer, n_head, ffn, p, img, frames, self._attn_mode(), in_chans=chans,
                               ln_eps=f.cfg.number(f.key("ln_eps"), 1e-6))

    def preprocess(self) -> Preprocess:
        return load_recipe(self.src, self.hparams(), LEVJEPA_RECIPE, "config.json's img_size",
                           ("video_preprocessor_config.json", "preprocessor_config.json"))

    # -- tensors --------------------------------------------------------------------------------

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        enc, s = self.hparams(), self.source
        w = s.take("patch_embed.proj.weight")
        yield "enc.patch_embed.weight", w.reshape(w.shape[0], -1)  # [D, C, 1, P, P] -> [D, C*1*P*P]
        yield "enc.patch_embed.bias", s.take("patch_embed.proj.bias")
        yield "enc.cls_token", s.take("cls_token").reshape(-1)
        for i in range(enc.n_layer):
            for dst, src in TIMM_BLOCK.items():
                yield from s.linear(f"enc.blk.{i}.{dst}", f"blocks.{i}.{src}", bias=True)
        yield from s.linear("enc.norm", "norm", bias=True)
