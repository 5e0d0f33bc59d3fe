"""Pre-LN ViT blocks and the two encoders the world models use, in numpy: HF's ViTModel (LeWM)
and Meta's V-JEPA 2 VisionTransformer with 3-D RoPE (V-JEPA 2-AC)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .ops import ACTS, LayerNorm, Linear, attention, f64, merge_heads, rope3d, split_heads

Positions = tuple[np.ndarray, np.ndarray, np.ndarray]  # (t, h, w) per token


@dataclass(frozen=True)
class Block:
    """norm1 -> attention -> residual, norm2 -> MLP -> residual. qkv is one Linear whose output is
    [q | k | v], each head-major; with positions, q and k take the 3-D RoPE."""

    ln1: LayerNorm
    qkv: Linear
    out: Linear
    ln2: LayerNorm
    up: Linear
    down: Linear
    n_head: int
    act: str = "gelu_erf"

    def __call__(self, x: np.ndarray, pos: Positions | None = None,
                 allowed: np.ndarray | None = None) -> np.ndarray:
        q, k, v = (split_heads(t, self.n_head) for t in np.split(self.qkv(self.ln1(x)), 3, axis=-1))
        if pos is not None:
            q, k = rope3d(q, *pos), rope3d(k, *pos)
        x = x + self.out(merge_heads(attention(q, k, v, allowed)))
        return x + self.down(ACTS[self.act](self.up(self.ln2(x))))


def patchify(pixels: np.ndarray, patch: int, tubelet: int = 1) -> np.ndarray:
    """[B, C, H, W] or [B, C, T, H, W] -> [B, tokens, C*tubelet*patch*patch]: tokens T-major, then
    row, then column; each row flattened in (C, t, y, x) order, as the conv kernel is."""
    x = f64(pixels)
    if x.ndim == 4:
        x = x[:, :, None]
    b, c, t, h, w = x.shape
    nt, gh, gw = t // tubelet, h // patch, w // patch
    x = x.reshape(b, c, nt, tubelet, gh, patch, gw, patch).transpose(0, 2, 4, 6, 1, 3, 5, 7)
    return x.reshape(b, nt * gh * gw, c * tubelet * patch * patch)


def grid_positions(nt: int, gh: int, gw: int) -> Positions:
    n = np.arange(nt * gh * gw)
    return n // (gh * gw), (n % (gh * gw)) // gw, n % gw


@dataclass(frozen=True)
class HFViT:
    """transformers' ViTModel: conv patches, CLS first, learned positions (CLS slot included)."""

    patch_embed: Linear  # weight [D, C*P*P]
    cls_token: np.ndarray  # [D]
    pos_embed: np.ndarray  # [1 + P, D]
    blocks: Sequence[Block]
    norm: LayerNorm
    patch: int

    def __call__(self, pixels: np.ndarray) -> np.ndarray:
        """pixels [N, C, S, S] (normalised) -> last_hidden_state [N, 1 + P, D]."""
        x = self.patch_embed(patchify(pixels, self.patch))
        cls = np.broadcast_to(self.cls_token, (len(x), 1, x.shape[-1]))
        x = np.concatenate([cls, x], axis=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)


@dataclass(frozen=True)
class VJEPA2Encoder:
    """Meta's V-JEPA 2 ViT: tubelet patches, no CLS, no position table, 3-D RoPE in every block."""

    patch_embed: Linear  # weight [D, C*T*P*P]
    blocks: Sequence[Block]
    norm: LayerNorm
    patch: int
    tubelet: int

    def __call__(self, clip: np.ndarray) -> np.ndarray:
        """clip [B, C, T, H, W] (normalised) -> tokens [B, T/tubelet * H/P * W/P, D]."""
        t, h, w = clip.shape[2:]
        x = self.patch_embed(patchify(clip, self.patch, self.tubelet))
        pos = grid_positions(t // self.tubelet, h // self.patch, w // self.patch)
        for blk in self.blocks:
            x = blk(x, pos)
        return self.norm(x)
