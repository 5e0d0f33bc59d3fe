"""LeWM (LeWorldModel, family lewm) in its published layout: a `weights.pt` torch state dict and the
Hydra `config.json` beside it (`stable_worldmodel.wm.lewm.LeWM` or le-wm's own `jepa.JEPA`).

The state dict holds `encoder.*` (an HF ViTModel built by stable_pretraining's `vit_hf`, saved under
the legacy transformers-4.x names: `encoder.encoder.layer.{i}.attention.attention.query`, ...),
`projector.*` and `pred_proj.*` (`MLP`: Linear, BatchNorm1d, GELU, Linear), `action_encoder.*`
(`Embedder`: Conv1d k=1, Linear, SiLU, Linear) and `predictor.*` (`ARPredictor`: learned positions,
adaLN-zero blocks, a final LayerNorm). Two folds, both in float64: each BatchNorm (eval statistics)
into the Linear before it, and the Embedder's Conv1d (a per-step Linear) into the Linear after it.
BatchNorm's `num_batches_tracked` is dropped; anything else unmapped is an error.

Sizes: the ViT's width, depth, MLP width, patch and image size come from the tensors; config.json's
`encoder` values (`hidden_size`, `num_hidden_layers`, `num_attention_heads`, `intermediate_size`),
else vit_hf's defaults for its `size` (tiny: 192, 12 layers, 3 heads, MLP 4x), must agree with them.
The head counts (encoder and predictor) come from config.json only. Needs torch to read weights.pt
(weights_only=True, never a full unpickle)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..gguf import tensors as gguf_tensors
from ..gguf.schema import Encoder, Preprocess, pred_keys
from ..gguf.tensors import Expected
from ..gguf.writer import PartSpec
from .base import Config, Converter, beside, read_json, register
from .hf_vit import _BLOCK as HF_VIT_BLOCK
from .hf_vit import hf_encoder
from .source import TensorSource
from .vjepa2_meta import ArraySource, torch_load

WEIGHTS = "weights.pt"
TARGETS = ("wm.lewm.LeWM", "jepa.JEPA")
# vit_hf(size=...) before its kwargs: hidden, layers, heads (intermediate = 4 x hidden).
VIT_SIZES = {"tiny": (192, 12, 3), "small": (384, 12, 6), "base": (768, 12, 12), "large": (1024, 24, 16)}
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
ADALN_EPS = 1e-6  # ConditionalBlock's norm1/norm2 (no affine)
LN_EPS = 1e-5  # nn.LayerNorm default: Attention.norm, FeedForward's first layer, Transformer.norm
BN_EPS = 1e-5  # nn.BatchNorm1d default


def fold_batchnorm(w: np.ndarray, b: np.ndarray, mean: np.ndarray, var: np.ndarray, gamma: np.ndarray,
                   beta: np.ndarray, eps: float = BN_EPS) -> tuple[np.ndarray, np.ndarray]:
    """Linear(w, b) then eval BatchNorm -> one Linear, computed in float64, returned float32."""
    s = np.asarray(gamma, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
    wf = np.asarray(w, np.float64) * s[:, None]
    bf = (np.asarray(b, np.float64) - np.asarray(mean, np.float64)) * s + np.asarray(beta, np.float64)
    return wf.astype(np.float32), bf.astype(np.float32)


def fold_linears(w_in: np.ndarray, b_in: np.ndarray, w_out: np.ndarray,
                 b_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Linear(w_in, b_in) then Linear(w_out, b_out) -> one Linear (float64, returned float32)."""
    wo = np.asarray(w_out, np.float64)
    w = wo @ np.asarray(w_in, np.float64)
    b = wo @ np.asarray(b_in, np.float64) + np.asarray(b_out, np.float64)
    return w.astype(np.float32), b.astype(np.float32)


def _target(section: Any) -> str:
    return str(section.get("_target_", "")) if isinstance(section, Mapping) else ""


def _section(cfg: Config, name: str) -> Config:
    if not isinstance(cfg.get(name), dict):
        raise ValueError(f"{cfg.path}: no {name!r} section")
    return cfg.section(name)


def _same(field: str, configured: int | None, found: int) -> int:
    if configured is not None and configured != found:
        raise ValueError(f"unsupported {field}={configured}: the weights have {found}")
    return found


def _agree(cfg: Config, key: str, found: int, default: int | None = None) -> int:
    """What the weights have, when the config's `key` (or its default) says so too."""
    configured = cfg.integer(key, default) if cfg.get(key) is not None or default is not None else None
    try:
        return _same(f"{cfg.where}{key}", configured, found)
    except ValueError as e:
        raise ValueError(f"{cfg.path}: {e}") from None


@dataclass(frozen=True)
class LeWMSpec:
    """Everything beyond the ViT: jepa.pred.* / jepa.enc.proj_act and the tensors they imply."""

    embed_dim: int  # D: projector output = predictor width
    n_layer: int
    n_head: int
    head_dim: int
    ffn_dim: int
    n_frames: int  # the predictor's window (pos_embedding rows)
    action_dim: int  # A = frameskip x env action dim
    action_hidden: int  # the Embedder's MLP width (mlp_scale x D)
    enc_width: int  # the ViT width (projector input)
    proj_hidden: int  # projector hidden width
    pred_proj_hidden: int  # pred_proj hidden width

    kind = "lewm"
    frame_causal = True
    ln_eps = LN_EPS
    adaln_eps = ADALN_EPS
    act = "gelu_erf"
    qkv_bias = False
    action_act = "silu"
    proj_act = "gelu_erf"

    def keys(self) -> dict[str, Any]:
        return {"jepa.enc.proj_act": "gelu_erf", **pred_keys(
            self, "kind embed_dim n_layer n_head head_dim ffn_dim n_frames action_dim frame_causal ln_eps "
                  "adaln_eps act qkv_bias action_act proj_act")}

    def table(self) -> dict[str, Expected]:
        return gguf_tensors.LEWM.table({
            "E": self.enc_width, "D": self.embed_dim, "Fp": self.ffn_dim, "Ip": self.n_head * self.head_dim,
            "T": self.n_frames, "A": self.action_dim, "Hp": self.proj_hidden, "Hq": self.pred_proj_hidden,
            "M": self.action_hidden, "n_layer": self.n_layer, "qkv_bias": self.qkv_bias,
        })


def _weights_path(src: Path) -> Path:
    return src / WEIGHTS if src.is_dir() else src


@register
class LeWM(Converter):
    family = "lewm"

    @classmethod
    def detect(cls, src: Path) -> bool:
        cfg = read_json(beside(src, "config.json"))
        return (cfg is not None and _weights_path(src).is_file()
                and any(_target(cfg).endswith(t) for t in TARGETS))

    def open_source(self) -> TensorSource:
        import torch

        cfg = read_json(beside(self.src, "config.json"))
        if cfg is None:
            raise ValueError(f"{self.src}: no config.json (LeWM's Hydra model config) beside the weights")
        if not any(_target(cfg).endswith(t) for t in TARGETS):
            raise ValueError(f"unsupported _target_={_target(cfg) or None} (expected a LeWM model config)")
        self.config: Config = cfg
        path = _weights_path(self.src)
        if not path.is_file():
            raise ValueError(f"{path}: no such file (LeWM ships its weights as {WEIGHTS})")
        state = torch_load(path)
        if not isinstance(state, dict):
            raise ValueError(f"{path}: not a state dict")
        arrays: dict[str, np.ndarray] = {}
        self.skipped: list[str] = []
        for k, v in state.items():
            if not isinstance(v, torch.Tensor):
                raise ValueError(f"{path}: entry {k!r} is not a tensor")
            if str(k).endswith(".num_batches_tracked"):
                self.skipped.append(str(k))
            arrays[str(k)] = v.detach().to(torch.float32).numpy() if v.is_floating_point() else v.numpy()
        return ArraySource(arrays, path)

    # -- hyperparameters -------------------------------------------------------------------------

    def hparams(self) -> Encoder:
        enc_cfg = _section(self.config, "encoder")
        if "vit_hf" not in _target(enc_cfg):
            raise ValueError(f"unsupported encoder _target_={_target(enc_cfg) or None} (expected vit_hf)")
        size = enc_cfg.choice("size", VIT_SIZES, "tiny")
        hidden, layers, heads = VIT_SIZES[size]
        hidden = enc_cfg.integer("hidden_size", hidden, lo=1)
        s = self.source
        d, chans, p, p2 = s.shape("encoder.embeddings.patch_embeddings.projection.weight")
        if p != p2:
            raise ValueError(f"unsupported patch_size={[p, p2]}")
        n_layer = 0
        while s.has(f"encoder.encoder.layer.{n_layer}.layernorm_before.weight") or s.has(
                f"encoder.layers.{n_layer}.layernorm_before.weight"):
            n_layer += 1
        n_pos = s.shape("encoder.embeddings.position_embeddings")[-2] - 1
        grid = math.isqrt(n_pos)
        if grid * grid != n_pos:
            raise ValueError(f"unsupported position table of {n_pos} patch rows (not a square grid)")
        ffn = s.shape(s.first([f"encoder.{n.format(i=0)}" for n in HF_VIT_BLOCK["ffn_up"]]) + ".weight")[0]
        return Encoder(
            embed_dim=_agree(enc_cfg, "hidden_size", d, hidden),
            n_layer=_agree(enc_cfg, "num_hidden_layers", n_layer, layers),
            n_head=enc_cfg.integer("num_attention_heads", heads, lo=1),
            ffn_dim=_agree(enc_cfg, "intermediate_size", ffn, 4 * hidden),
            patch_size=_agree(enc_cfg, "patch_size", p),
            img_size=_agree(enc_cfg, "image_size", grid * p),
            in_chans=chans,
            ln_eps=1e-12,
            act="gelu_erf",
            cls_token=True,
        )

    def spec(self) -> LeWMSpec:
        s, cfg = self.source, self.config
        pred = _section(cfg, "predictor")
        pos = s.shape("predictor.pos_embedding")
        d = pos[-1]
        for key in ("input_dim", "hidden_dim", "output_dim"):
            if pred.get(key) is not None and pred.integer(key) != d:
                raise ValueError(f"{pred.path}: unsupported predictor {key}={pred[key]} (only input_dim = "
                                 f"hidden_dim = output_dim = {d}, LeWM's configuration, is supported)")
        n_layer = s.count("predictor.transformer.layers.{i}.adaLN_modulation.1.weight")
        if "heads" not in pred:
            raise ValueError(f"{pred.path}: predictor.heads is missing (the head count is not in the "
                             "weights)")
        n_head, head_dim = pred.integer("heads", lo=1), pred.integer("dim_head", 64, lo=1)
        qkv_rows = s.shape("predictor.transformer.layers.0.attn.to_qkv.weight")[0]
        _same("predictor heads x dim_head x 3", 3 * n_head * head_dim, qkv_rows)
        return LeWMSpec(
            embed_dim=d,
            n_layer=_agree(pred, "depth", n_layer),
            n_head=n_head,
            head_dim=head_dim,
            ffn_dim=_agree(pred, "mlp_dim", s.shape("predictor.transformer.layers.0.mlp.net.1.weight")[0]),
            n_frames=_agree(pred, "num_frames", pos[-2]),
            action_dim=_agree(_section(cfg, "action_encoder"), "input_dim",
                              s.shape("action_encoder.patch_embed.weight")[1]),
            action_hidden=s.shape("action_encoder.embed.0.weight")[0],
            enc_width=s.shape("projector.net.0.weight")[1],
            proj_hidden=s.shape("projector.net.0.weight")[0],
            pred_proj_hidden=s.shape("pred_proj.net.0.weight")[0],
        )

    def preprocess(self) -> Preprocess:
        # eval.py: ToImage, ToDtype(float32, scale=True), Normalize(ImageNet), Resize(img_size).
        size = self.hparams().img_size
        return Preprocess(mean=IMAGENET_MEAN, std=IMAGENET_STD, resize_short=size, crop=size,
                          resample="bilinear", resize_mode="squash")

    # -- tensors ---------------------------------------------------------------------------------

    def _mlp(self, dst: str, src: str) -> Iterator[tuple[str, np.ndarray]]:
        """`MLP` (Linear, BatchNorm1d, GELU, Linear) -> dst.0 (BatchNorm folded in) and dst.2."""
        s = self.source
        if not s.has(f"{src}.net.1.running_mean"):
            what = "a LayerNorm" if s.has(f"{src}.net.1.weight") else "no norm"
            raise ValueError(f"unsupported {src} norm_fn ({what}; LeWM's MLP uses BatchNorm1d)")
        norm_cfg = _section(self.config, src.split(".")[0])
        eps = norm_cfg.section("norm_fn").number("eps", BN_EPS) if isinstance(norm_cfg.get("norm_fn"), dict) \
            else BN_EPS
        bn = ("running_mean", "running_var", "weight", "bias")
        mean, var, gamma, beta = (s.take(f"{src}.net.1.{n}") for n in bn)
        w, b = fold_batchnorm(s.take(f"{src}.net.0.weight"), s.take(f"{src}.net.0.bias"), mean, var, gamma,
                              beta, eps=eps)
        yield f"{dst}.0.weight", w
        yield f"{dst}.0.bias", b
        yield from s.linear(f"{dst}.2", f"{src}.net.3", bias=True)

    def _predictor(self, spec: LeWMSpec) -> Iterator[tuple[str, np.ndarray]]:
        s = self.source
        yield "pred.pos_embed", s.take("predictor.pos_embedding").reshape(spec.n_frames, -1)
        for i in range(spec.n_layer):
            src, dst = f"predictor.transformer.layers.{i}.", f"pred.blk.{i}."
            for d, m in (("adaln", "adaLN_modulation.1"), ("ln1", "attn.norm"), ("attn_qkv", "attn.to_qkv"),
                         ("attn_out", "attn.to_out.0"), ("ln2", "mlp.net.0"), ("ffn_up", "mlp.net.1"),
                         ("ffn_down", "mlp.net.4")):
                yield from s.linear(dst + d, src + m, bias=d != "attn_qkv")  # to_qkv has no bias
        yield from s.linear("pred.norm", "predictor.transformer.norm", bias=True)
        yield from self._mlp("pred.proj", "pred_proj")
        conv = s.take("action_encoder.patch_embed.weight")  # Conv1d(A, smoothed, k=1): [smoothed, A, 1]
        if conv.ndim != 3 or conv.shape[2] != 1:
            raise ValueError(f"unsupported action_encoder.patch_embed shape={list(conv.shape)} (k=1 only)")
        w, b = fold_linears(conv[:, :, 0], s.take("action_encoder.patch_embed.bias"),
                            s.take("action_encoder.embed.0.weight"), s.take("action_encoder.embed.0.bias"))
        yield "pred.action_embed.0.weight", w
        yield "pred.action_embed.0.bias", b
        yield from s.linear("pred.action_embed.2", "action_encoder.embed.2", bias=True)

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        qkv_bias = _section(self.config, "encoder").flag("qkv_bias", True)  # ViTConfig's default
        yield from hf_encoder(self.source, "encoder.", self.hparams().n_layer, qkv_bias)
        yield from self._mlp("enc.proj", "projector")
        yield from self._predictor(self.spec())
        for name in self.skipped:
            self.source.skip(name)

    def parts(self) -> list[PartSpec]:
        return [self.spec()]
