"""timm-layout ViT safetensors (family levjepa: the LeJEPA ViT-S/16 release).

Keys may carry a `backbone.` prefix. Hyperparameters come from tensor shapes, except the head count,
which shapes cannot tell: config.json's num_heads (top level or model_args) if present, else
--n-head, else the standard timm size for the width (ViT-Ti 192 -> 3, S 384 -> 6, B 768 -> 12,
L 1024 -> 16, H 1280 -> 16). LayerNorm eps is timm's 1e-6; GELU is exact (erf).

Positions: a table of 1 + patches rows holds a CLS slot (timm's default); a table of exactly the
patch count (timm's no_embed_class) gives CLS and registers no position. A classifier (`head.*`,
`fc_norm.*`) is not the encoder and is refused rather than silently dropped."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypedDict

import numpy as np
from safetensors import SafetensorError, safe_open

from ..gguf.schema import Encoder, Preprocess
from .base import Config, Converter, beside, read_json, register, resolve_n_head
from .preprocess import load_recipe
from .recipes import IMAGENET_RECIPE
from .source import TensorSource, safetensors_files

PREFIXES = ("backbone.",)
_HEADS_BY_WIDTH = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16}
# timm's block modules (also Meta's V-JEPA 2 encoders and AC predictor, built from timm's blocks).
TIMM_BLOCK = {"ln1": "norm1", "attn_qkv": "attn.qkv", "attn_out": "attn.proj", "ln2": "norm2",
              "ffn_up": "mlp.fc1", "ffn_down": "mlp.fc2"}


class TimmSizes(TypedDict):
    embed_dim: int
    n_layer: int
    n_head: int
    ffn_dim: int


def timm_sizes(s: TensorSource, n_head: Callable[[int], int]) -> TimmSizes:
    """Width, depth, heads and MLP width of a timm-layout encoder; the heads from `n_head(width)`."""
    d = s.shape("patch_embed.proj.weight")[0]
    return TimmSizes(embed_dim=d, n_layer=s.count("blocks.{i}.norm1.weight"), n_head=n_head(d),
                     ffn_dim=s.shape("blocks.0.mlp.fc1.weight")[0])


def timm_block(s: TensorSource, src: str, dst: str) -> Iterator[tuple[str, np.ndarray]]:
    """One timm-layout block `src` (e.g. "blocks.3") as the GGUF block `dst`; each bias when present."""
    for d, m in TIMM_BLOCK.items():
        yield from s.linear(f"{dst}.{d}", f"{src}.{m}")


def _is_square(n: int) -> bool:
    return n > 0 and math.isqrt(n) ** 2 == n


@register
class TimmViT(Converter):
    family = "levjepa"

    @classmethod
    def detect(cls, src: Path) -> bool:
        try:
            files = safetensors_files(src)
        except (ValueError, OSError):
            return False
        keys: set[str] = set()
        for path in files:
            try:
                with safe_open(str(path), framework="np") as f:
                    keys.update(f.keys())
            except (OSError, SafetensorError) as e:
                if path.suffix == ".safetensors":  # a broken weights file: no converter can read it
                    raise ValueError(f"{path}: not a readable safetensors file ({e})") from None
                return False  # not a safetensors file (e.g. a .pt checkpoint)
        return any(p + "blocks.0.attn.qkv.weight" in keys for p in ("", *PREFIXES))

    def open_source(self) -> TensorSource:
        src = TensorSource(safetensors_files(self.src), prefixes=PREFIXES)
        heads = [n for n in src.names() if n.split(".")[0] in ("head", "fc_norm")]
        if heads:
            raise ValueError(f"unsupported head={heads[0]} (a classifier head is not the encoder; "
                             "export the backbone alone)")
        return src

    def _n_head(self, d: int) -> int:
        cfg = read_json(beside(self.src, "config.json")) or Config(beside(self.src, "config.json"), {})
        found = [c.integer(k, lo=1) for c in (cfg, cfg.section("model_args"))
                 for k in ("num_heads", "n_head", "num_attention_heads") if c.get(k) is not None]
        return resolve_n_head(found[0] if found else None, self.options.n_head, d, _HEADS_BY_WIDTH)

    def hparams(self) -> Encoder:
        s = self.source
        _, c, p, p2 = s.shape("patch_embed.proj.weight")
        if p != p2:
            raise ValueError(f"unsupported patch_size={[p, p2]}")
        n_reg = s.shape("reg_token")[1] if s.has("reg_token") else 0
        has_cls = s.has("cls_token")
        pos = s.shape("pos_embed")
        if len(pos) != 3:
            raise ValueError(f"unsupported pos_embed shape={list(pos)}")
        rows = pos[1]
        if has_cls and not n_reg and _is_square(rows - 1):
            n_patch = rows - 1  # a CLS slot first, then the patch grid
        elif _is_square(rows):
            n_patch = rows
        else:
            raise ValueError(f"unsupported pos_embed rows={rows} (cls={has_cls}, registers={n_reg})")
        return Encoder(
            **timm_sizes(s, self._n_head),
            patch_size=p,
            img_size=math.isqrt(n_patch) * p,
            in_chans=c,
            n_registers=n_reg,
            ln_eps=1e-6,
            act="gelu_erf",
            cls_token=has_cls,
            qkv_fused=True,
            layer_scale=s.has("blocks.0.ls1.gamma"),
        )

    def preprocess(self) -> Preprocess:
        return load_recipe(self.src, self.hparams(), IMAGENET_RECIPE, "the position table's grid")

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        enc, s = self.hparams(), self.source
        w = s.take("patch_embed.proj.weight")
        yield "enc.patch_embed.weight", w.reshape(w.shape[0], -1)  # [D, C, P, P] -> [D, C*P*P]
        if s.has("patch_embed.proj.bias"):
            yield "enc.patch_embed.bias", s.take("patch_embed.proj.bias")
        if enc.cls_token:
            yield "enc.cls_token", s.take("cls_token").reshape(-1)
        if enc.n_registers:
            yield "enc.reg_tokens", s.take("reg_token").reshape(enc.n_registers, enc.embed_dim)
        yield "enc.pos_embed", s.take("pos_embed").reshape(-1, enc.embed_dim)
        for i in range(enc.n_layer):
            yield from timm_block(s, f"blocks.{i}", f"enc.blk.{i}")
            if enc.layer_scale:
                yield f"enc.blk.{i}.ls1.weight", s.take(f"blocks.{i}.ls1.gamma")
                yield f"enc.blk.{i}.ls2.weight", s.take(f"blocks.{i}.ls2.gamma")
        yield "enc.norm.weight", s.take("norm.weight")
        if s.has("norm.bias"):
            yield "enc.norm.bias", s.take("norm.bias")
