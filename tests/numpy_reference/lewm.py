"""LeWM (LeWorldModel) in numpy: le-wm's `JEPA` with its `ARPredictor` of adaLN-zero
`ConditionalBlock`s, the `Embedder` of actions and the two `MLP` projectors (module.py, jepa.py).

Predictor: x = emb + pos[:T]; per block, from c = the action embedding of the same time step:
(shift, scale, gate) x 2 = Linear(SiLU(c)); x += gate_msa * Attn(LN(x) * (1 + scale_msa) +
shift_msa); x += gate_mlp * FF(LN(x) * (1 + scale_mlp) + shift_mlp), LN non-affine (adaln_eps);
Attn and FF each open with their own affine LayerNorm; attention is causal; a final LayerNorm."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .ops import ACTS, BatchNorm, LayerNorm, Linear, attention, causal, f64, merge_heads, silu, split_heads
from .vit import HFViT


@dataclass(frozen=True)
class Projector:
    """`MLP`: Linear -> [BatchNorm1d (eval)] -> act -> Linear; bn is None once folded into fc0."""

    fc0: Linear
    fc2: Linear
    bn: BatchNorm | None = None
    act: str = "gelu_erf"

    def __call__(self, x: np.ndarray) -> np.ndarray:
        h = self.fc0(x)
        if self.bn is not None:
            h = self.bn(h)
        return self.fc2(ACTS[self.act](h))


@dataclass(frozen=True)
class ActionEmbedder:
    """`Embedder`: Conv1d(k=1) over time (a per-step Linear; None once folded into fc0), then
    Linear -> act -> Linear."""

    fc0: Linear
    fc2: Linear
    smooth: Linear | None = None
    act: str = "silu"

    def __call__(self, actions: np.ndarray) -> np.ndarray:
        x = f64(actions)
        if self.smooth is not None:
            x = self.smooth(x)
        return self.fc2(ACTS[self.act](self.fc0(x)))


@dataclass(frozen=True)
class AdaLNBlock:
    adaln: Linear  # [6D, D]
    ln1: LayerNorm  # Attention's own norm (affine)
    qkv: Linear  # [3*heads*dim_head, D], no bias
    out: Linear  # [D, heads*dim_head]
    ln2: LayerNorm  # FeedForward's own norm (affine)
    up: Linear
    down: Linear
    n_head: int
    adaln_eps: float = 1e-6
    act: str = "gelu_erf"

    def __call__(self, x: np.ndarray, c: np.ndarray) -> np.ndarray:
        shift1, scale1, gate1, shift2, scale2, gate2 = np.split(self.adaln(silu(c)), 6, axis=-1)
        norm = LayerNorm(self.adaln_eps)
        h = self.ln1(norm(x) * (1.0 + scale1) + shift1)
        q, k, v = (split_heads(t, self.n_head) for t in np.split(self.qkv(h), 3, axis=-1))
        x = x + gate1 * self.out(merge_heads(attention(q, k, v, causal(x.shape[1]))))
        h = self.ln2(norm(x) * (1.0 + scale2) + shift2)
        return x + gate2 * self.down(ACTS[self.act](self.up(h)))


@dataclass(frozen=True)
class ARPredictor:
    pos_embed: np.ndarray  # [n_frames, D]
    blocks: Sequence[AdaLNBlock]
    norm: LayerNorm

    @property
    def n_frames(self) -> int:
        return len(self.pos_embed)

    def __call__(self, emb: np.ndarray, act_emb: np.ndarray) -> np.ndarray:
        """emb, act_emb [B, T <= n_frames, D] -> [B, T, D] (before pred_proj)."""
        t = emb.shape[1]
        if t > self.n_frames:
            raise ValueError(f"{t} frames, but the predictor's window is {self.n_frames}")
        x = f64(emb) + self.pos_embed[:t]
        c = f64(act_emb)
        for blk in self.blocks:
            x = blk(x, c)
        return self.norm(x)


@dataclass(frozen=True)
class LeWM:
    encoder: HFViT | None
    projector: Projector
    action_embed: ActionEmbedder
    predictor: ARPredictor
    pred_proj: Projector

    def embed(self, pixels: np.ndarray) -> np.ndarray:
        """`JEPA.encode`'s emb: frames [N, C, S, S] (normalised) -> projector(CLS) [N, D]."""
        if self.encoder is None:
            raise ValueError("this model has no encoder")
        return self.projector(self.encoder(pixels)[:, 0])

    def predict_raw(self, emb: np.ndarray, actions: np.ndarray) -> np.ndarray:
        return self.predictor(emb, self.action_embed(actions))

    def predict(self, emb: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """`ctx.lewm_predict`: embeddings [B, T, D] and raw actions [B, T, A] -> pred_proj of the
        predictor's output [B, T, D], float32 (row t predicts frame t + 1)."""
        return self.pred_proj(self.predict_raw(emb, actions)).astype(np.float32)
