"""V-JEPA 2-AC in numpy: Meta's `VisionTransformerPredictorAC` (src/models/ac_predictor.py) and
the world model's encode step (notebooks/utils/world_model_wrapper.py).

Predictor: the normalised latents go through `embed` (D -> Dp); per latent frame t the sequence is
[action token, state token, HW patch tokens]; every block is a pre-LN ViT block with the tiled 3-D
RoPE, where patch tokens sit at (t, row, col) and the conditioning tokens at (t, 0, 0) (only their
first chunk rotates); attention is causal over whole frames. The conditioning tokens are dropped,
then the final LayerNorm and `proj` (Dp -> D). Output row block t predicts frame t + 1."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from jepa.planning.rollout import NORM_REPS_EPS

from .ops import LayerNorm, Linear, f64
from .vit import Block, Positions, VJEPA2Encoder

N_COND = 2  # action, state


@dataclass(frozen=True)
class ACPredictor:
    embed: Linear  # [Dp, D]
    action_embed: Linear  # [Dp, 7]
    state_embed: Linear  # [Dp, 7]
    blocks: Sequence[Block]
    norm: LayerNorm
    proj: Linear  # [D, Dp]
    grid: tuple[int, int]  # patch rows, patch columns of a frame
    frame_causal: bool = True

    @property
    def tokens_per_frame(self) -> int:
        return self.grid[0] * self.grid[1]

    def layout(self, n_frames: int) -> tuple[Positions, np.ndarray]:
        """RoPE positions (t, h, w) of the interleaved sequence and its attention mask."""
        gh, gw = self.grid
        hw = gh * gw
        per = N_COND + hw
        i = np.arange(n_frames * per)
        t, j = i // per, i % per - N_COND
        patch = j >= 0
        h = np.where(patch, np.maximum(j, 0) // gw, 0)
        w = np.where(patch, np.maximum(j, 0) % gw, 0)
        allowed = t[None, :] <= t[:, None] if self.frame_causal else np.ones((len(i), len(i)), bool)
        return (t, h, w), allowed

    def sequence(self, latents: np.ndarray, actions: np.ndarray, states: np.ndarray) -> np.ndarray:
        """[B, T*HW, D], [B, T, 7], [B, T, 7] -> the interleaved predictor input [B, T*(2+HW), Dp]."""
        b, n, _ = latents.shape
        hw = self.tokens_per_frame
        if n % hw:
            raise ValueError(f"latents: {n} tokens is not a whole number of {hw}-token frames")
        t = n // hw
        if actions.shape[:2] != (b, t) or states.shape[:2] != (b, t):
            raise ValueError(f"actions/states: expected [{b}, {t}, 7], got {list(actions.shape)}, "
                             f"{list(states.shape)}")
        x = self.embed(f64(latents)).reshape(b, t, hw, -1)
        a = self.action_embed(f64(actions))[:, :, None]
        s = self.state_embed(f64(states))[:, :, None]
        return np.concatenate([a, s, x], axis=2).reshape(b, t * (N_COND + hw), -1)

    def __call__(self, latents: np.ndarray, actions: np.ndarray, states: np.ndarray,
                 taps: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """The predictor's raw output [B, T*HW, D] (float64). `taps`, when given, receives
        "block{i}_in" / "block{i}_out" (the interleaved sequence around every block)."""
        x = self.sequence(latents, actions, states)
        b = len(x)
        t = x.shape[1] // (N_COND + self.tokens_per_frame)
        pos, allowed = self.layout(t)
        for i, blk in enumerate(self.blocks):
            if taps is not None:
                taps[f"block{i}_in"] = x
            x = blk(x, pos, allowed)
            if taps is not None:
                taps[f"block{i}_out"] = x
        x = x.reshape(b, t, N_COND + self.tokens_per_frame, -1)[:, :, N_COND:].reshape(b, -1, x.shape[-1])
        return self.proj(self.norm(x))


@dataclass(frozen=True)
class ACWorldModel:
    encoder: VJEPA2Encoder | None
    predictor: ACPredictor
    norm_reps_eps: float = NORM_REPS_EPS

    def normalize(self, x: np.ndarray) -> np.ndarray:
        return LayerNorm(self.norm_reps_eps)(f64(x))

    def encode_frames(self, pixels: np.ndarray) -> np.ndarray:
        """`WorldModel.encode`: frames [N, C, H, W] (normalised), each repeated to fill one tubelet
        and encoded on its own -> normalised latents [N, HW, D]."""
        if self.encoder is None:
            raise ValueError("this model has no encoder")
        clip = np.repeat(f64(pixels)[:, :, None], self.encoder.tubelet, axis=2)
        return self.normalize(self.encoder(clip))

    def predict(self, latents: np.ndarray, actions: np.ndarray, states: np.ndarray) -> np.ndarray:
        """`ctx.ac_predict`: float32 in, float32 out (see `ACPredictor`)."""
        return self.predictor(latents, actions, states).astype(np.float32)
