"""The encoders bench.engine (CPU) and bench.gpu time: transformers' ViTModel and VJEPA2Model at the
released dims (and tiny ones for --smoke), built with random weights, in the layouts each engine takes.
Every engine runs the same network and weights: the model is saved and converted by jepa-convert, and
exported to ONNX from the same module (last_hidden)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Spec:
    """One model: a transformers ViTModel ("image") or VJEPA2Model encoder ("video") at these dims."""

    kind: str
    label: str
    hidden: int
    layers: int
    heads: int
    ffn: int
    img: int
    patch: int = 16
    frames: int = 1
    tubelet: int = 1

    @property
    def patches(self) -> int:
        return (self.frames // self.tubelet) * (self.img // self.patch) ** 2

    @property
    def tokens(self) -> int:
        """N: the sequence the blocks run on (a ViT has a CLS token, the V-JEPA 2 encoder none)."""
        return self.patches + (1 if self.kind == "image" else 0)

    @property
    def prefix(self) -> int:
        return self.tokens - self.patches

    def flops(self) -> float:
        """Multiply-adds x 2 per item: patch embedding, per layer the four attention and two FFN
        matrices (2 N (4 D^2 + 2 D F)) and the two attention products (4 N^2 D). Norms, softmax,
        GELU and adds are left out (well under 1 %)."""
        n, d, f = self.tokens, self.hidden, self.ffn
        embed = 2.0 * self.patches * (3 * self.tubelet * self.patch**2) * d
        return embed + self.layers * (2.0 * n * (4 * d * d + 2 * d * f) + 4.0 * n * n * d)

    def input_shape(self, b: int) -> tuple[int, ...]:
        """jepa's layout: images [B, C, H, W], clips [B, C, T, H, W]."""
        if self.kind == "image":
            return (b, 3, self.img, self.img)
        return (b, 3, self.frames, self.img, self.img)


MODELS: dict[str, Spec] = {
    "vit-s16": Spec("image", "ViT-S/16", 384, 12, 6, 1536, 224),
    "vit-l16": Spec("image", "ViT-L/16", 1024, 24, 16, 4096, 224),
    "vjepa2-l16": Spec("video", "V-JEPA 2 ViT-L/16, 16 × 256²", 1024, 24, 16, 4096, 256, frames=16,
                       tubelet=2),
}
# --smoke: the same two kinds, tiny, so every variant runs end to end in seconds.
SMOKE_MODELS: dict[str, Spec] = {
    "vit-tiny": Spec("image", "ViT tiny (smoke)", 64, 2, 4, 128, 32),
    "vjepa2-tiny": Spec("video", "V-JEPA 2 tiny (smoke)", 64, 2, 4, 256, 32, frames=4, tubelet=2),
}


def last_hidden(model: Any, kind: str) -> Any:
    """A module mapping the model's native input to its final-norm tokens [B, N, D]: what every engine
    returns, and what torch.onnx.export traces."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if kind == "image":
                return self.m(pixel_values=x).last_hidden_state
            return self.m(pixel_values_videos=x, skip_predictor=True).last_hidden_state

    return LastHidden().eval()


def build_torch(spec: Spec, seed: int) -> Any:
    """A random-weight transformers model with these dims (LayerNorms away from 1 / 0, as in the
    parity tests, so no engine can skip a norm)."""
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(seed)
    if spec.kind == "image":
        from transformers import ViTConfig, ViTModel

        model = ViTModel(
            ViTConfig(hidden_size=spec.hidden, num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
                      intermediate_size=spec.ffn, image_size=spec.img, patch_size=spec.patch),
            add_pooling_layer=False,
        )
    else:
        from transformers import VJEPA2Config, VJEPA2Model

        model = VJEPA2Model(
            VJEPA2Config(hidden_size=spec.hidden, num_hidden_layers=spec.layers,
                         num_attention_heads=spec.heads, mlp_ratio=spec.ffn / spec.hidden, crop_size=spec.img,
                         patch_size=spec.patch, tubelet_size=spec.tubelet, frames_per_clip=spec.frames,
                         pred_num_hidden_layers=1)
        )
    model.eval()
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.add_(0.1 * torch.randn(mod.weight.shape))
                mod.bias.add_(0.1 * torch.randn(mod.bias.shape))
    return model


def hf_layout(spec: Spec, x: np.ndarray) -> np.ndarray:
    """transformers' input layout: images as jepa's, clips [B, T, C, H, W]."""
    return x if spec.kind == "image" else np.ascontiguousarray(x.transpose(0, 2, 1, 3, 4))


def export(model: Any, spec: Spec, path: Any) -> dict[str, Any]:
    """The model's ONNX (bench.peers.export_onnx): f32, a dynamic batch axis. What happened."""
    import torch

    from bench.peers import export_onnx

    example = torch.from_numpy(hf_layout(spec, np.zeros(spec.input_shape(2), np.float32)))
    batch = {0: torch.export.Dim("batch", min=1, max=64)}
    record, _ = export_onnx(last_hidden(model, spec.kind), (example,), path,
                            dynamic_axes={"x": {0: "batch"}, "tokens": {0: "batch"}}, dynamic_shapes=(batch,))
    return record
