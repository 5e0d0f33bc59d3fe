"""Meta's own V-JEPA 2 .pt checkpoints (github.com/facebookresearch/vjepa2): the encoder only.

The file is a dict of state dicts; like upstream's `src/hub/backbones.py` the encoder is read from
`target_encoder` (the V-JEPA 2 releases), else `encoder`, else `ema_encoder`, else the file itself when
it is a bare state dict. A file whose predictor is action-conditioned is V-JEPA 2-AC (family vjepa2_ac)
and is not auto-detected here; --family vjepa2 still converts its encoder alone. Keys lose `module.` and
`backbone.` as upstream's `_clean_backbone_key` does. Layout: `patch_embed.proj` (Conv3d, 5-D),
`blocks.{i}.{norm1, attn.qkv (fused, rows q;k;v), attn.proj, norm2, mlp.fc1, mlp.fc2}`, `norm`. A
`pos_embed` is skipped: upstream loads these encoders with strict=False because they use RoPE and never
read it. Anything else unmapped is an error.

Shapes give everything but the head count and the native clip size: those come from a config.json beside
the file (`num_heads`, `img_size` / `crop_size`, `num_frames` / `frames_per_clip`) when present, else
--n-head / --img-size / the standard width (ViT-B 768: 12, L 1024: 16, H 1280: 16, g 1408: 22,
G 1664: 26), and upstream's defaults (256 px, 64 frames). Needs torch (read with weights_only=True)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..gguf.schema import Encoder, Preprocess
from .base import Config, beside, read_json, resolve_n_head
from .recipes import vjepa2_recipe
from .source import TensorSource
from .timm_vit import TimmSizes, timm_block, timm_sizes
from .vjepa2_parts import HeadSpec, PredictorSpec

SUFFIXES = (".pt", ".pth", ".tar", ".ckpt")
T = TypeVar("T")
ENCODER_KEYS = ("target_encoder", "encoder", "ema_encoder")
_HEADS_BY_WIDTH = {768: 12, 1024: 16, 1280: 16, 1408: 22, 1664: 26}
_SKIPPED = ("pos_embed",)


class UnreadableCheckpoint(ValueError):
    """A .pt file torch cannot load: no converter can read it (detection says so, not 'no converter
    recognises it')."""


def torch_load(path: Path) -> Any:
    try:
        import torch
    except ImportError:
        raise ValueError(f"{path}: reading a .pt checkpoint needs torch (pip install torch)") from None
    if not path.is_file():  # a FIFO would hang torch.load; a directory is no checkpoint
        raise ValueError(f"{path}: not a regular file")
    try:
        try:
            return torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:
            # Legacy (non-zip) files cannot be memory-mapped.
            return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises whatever its unzip / unpickle meets (a truncated file, ...)
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise UnreadableCheckpoint(f"{path}: not a readable PyTorch checkpoint ({type(e).__name__}: "
                                   f"{first})") from None


def probe_checkpoint(src: Path, probe: Callable[[Any], T]) -> T | None:
    """For detection: probe(the checkpoint at src), None when src is no .pt-like file or probe or the
    load raises ValueError / OSError / RuntimeError (not this layout). An UnreadableCheckpoint goes
    through: no converter can read the file, and detection says so."""
    if not src.is_file() or src.suffix.lower() not in SUFFIXES:
        return None
    try:
        return probe(torch_load(src))
    except UnreadableCheckpoint:
        raise
    except (ValueError, OSError, RuntimeError):
        return None


def clean_key(key: str) -> str:
    """A state-dict key without DDP's `module.` and upstream's `backbone.` (`_clean_backbone_key`)."""
    return key.replace("module.", "").replace("backbone.", "")


def _encoder_state(ckpt: Any, path: Path) -> dict[str, Any]:
    if not isinstance(ckpt, dict):
        raise ValueError(f"{path}: not a checkpoint dict")
    for k in ENCODER_KEYS:
        if isinstance(ckpt.get(k), dict):
            return ckpt[k]
    if any(clean_key(str(k)) == "patch_embed.proj.weight" for k in ckpt):
        return ckpt
    looked = ", ".join(ENCODER_KEYS)
    raise ValueError(f"{path}: no encoder state dict (looked for {looked} and a bare state dict)")


def _is_action_conditioned(ckpt: Any) -> bool:
    """V-JEPA 2-AC files (encoder + action-conditioned predictor) belong to family vjepa2_ac."""
    pred = ckpt.get("predictor") if isinstance(ckpt, dict) else None
    return isinstance(pred, dict) and any("action_encoder" in str(k) for k in pred)


def detect(src: Path) -> bool:
    found = probe_checkpoint(src, lambda ckpt: (ckpt, _encoder_state(ckpt, src)))
    if found is None:
        return False
    ckpt, state = found
    names = {clean_key(str(k)) for k in state}
    return not _is_action_conditioned(ckpt) and "patch_embed.proj.weight" in names and not _is_2_1(names)


def _is_2_1(names: set[str]) -> bool:
    """A V-JEPA 2.1 encoder (an image patch embedding, per-level norms) is family vjepa2_1's."""
    return {"patch_embed_img.proj.weight", "norms_block.0.weight"} <= names


def state_arrays(src: Path, tables: list[tuple[str, Any, str]]) -> dict[str, np.ndarray]:
    """float32 arrays by cleaned name from (what, state dict, name prefix) tables: every entry a tensor,
    no two names equal once the prefixes are gone."""
    import torch

    arrays: dict[str, np.ndarray] = {}
    for what, table, prefix in tables:
        for k, v in table.items():
            if not isinstance(v, torch.Tensor):
                raise ValueError(f"{src}: entry {k!r} of {what} is not a tensor")
            name = prefix + clean_key(str(k))
            if name in arrays:
                raise ValueError(f"{src}: source tensor {k!r} clashes with another after removing prefixes")
            arrays[name] = v.detach().to(torch.float32).numpy()
    return arrays


def meta_encoder(sizes: TimmSizes, patch: int, img_size: int, chans: int, tubelet: int, n_frames: int,
                 **extra: Any) -> Encoder:
    """What Meta's V-JEPA encoders (2, 2-AC, 2.1) share: timm blocks with fused qkv, exact GELU, LayerNorm
    1e-6, 3-D RoPE, no CLS; `extra` for what a version adds."""
    return Encoder(**sizes, patch_size=patch, img_size=img_size, in_chans=chans, ln_eps=1e-6,
                   act="gelu_erf", cls_token=False, qkv_fused=True, pos_type="rope3d", tubelet_size=tubelet,
                   n_frames=n_frames, **extra)


class ArraySource(TensorSource):
    """A TensorSource over in-memory arrays (a torch state dict), with the same bookkeeping."""

    def __init__(self, arrays: dict[str, np.ndarray], origin: Path) -> None:
        self._arrays = arrays
        self._where = {k: (origin, k) for k in arrays}
        self._used: set[str] = set()

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._arrays[self._loc(name)[1]].shape)

    def take(self, name: str) -> np.ndarray:
        _, key = self._loc(name)
        self._used.add(name)
        return np.asarray(self._arrays[key], dtype=np.float32)


class MetaLayout:
    def __init__(self, src: Path, n_head: int | None, img_size: int | None = None) -> None:
        state = _encoder_state(torch_load(src), src)
        arrays = state_arrays(src, [("the encoder state dict", state, "")])
        self.src = src
        self.n_head_flag = n_head
        self.img_size_flag = img_size
        self.config = read_json(beside(src, "config.json")) or Config(beside(src, "config.json"), {})
        if _is_2_1(set(arrays)):
            raise ValueError(f"{src}: a V-JEPA 2.1 encoder (patch_embed_img, norms_block): convert it with "
                             "--family vjepa2_1")
        self.source: TensorSource = ArraySource(arrays, src)
        if self.source.has("blocks.0.mlp.fc3.weight"):
            raise ValueError("unsupported mlp=SwiGLU (blocks.0.mlp.fc3): V-JEPA 2 encoders use a GELU MLP")

    def _cfg(self, *keys: str) -> int | None:
        return self.config.first_positive(*keys)

    def _n_head(self, d: int) -> int:
        return resolve_n_head(self._cfg("num_heads", "n_head", "num_attention_heads"), self.n_head_flag, d,
                              _HEADS_BY_WIDTH)

    def encoder(self) -> Encoder:
        s = self.source
        shape = s.shape("patch_embed.proj.weight")
        if len(shape) == 5:
            _, chans, t, p, p2 = shape
        elif len(shape) == 4:
            (_, chans, p, p2), t = shape, 1
        else:
            raise ValueError(f"unsupported patch_embed.proj.weight shape={list(shape)}")
        if p != p2:
            raise ValueError(f"unsupported patch_size={[p, p2]}")
        img_size = self.img_size_flag or self._cfg("img_size", "crop_size") or 256
        n_frames = self._cfg("num_frames", "frames_per_clip") or 64
        return meta_encoder(timm_sizes(s, self._n_head), p, img_size, chans, t, n_frames)

    def predictor(self) -> PredictorSpec | None:
        return None

    def head(self) -> HeadSpec | None:
        return None

    def preprocess(self) -> Preprocess:
        return vjepa2_recipe(self.encoder().img_size)

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        enc, s = self.encoder(), self.source
        w = s.take("patch_embed.proj.weight")
        yield "enc.patch_embed.weight", w.reshape(w.shape[0], -1)  # [D, C, t, P, P] -> [D, C*t*P*P]
        if s.has("patch_embed.proj.bias"):
            yield "enc.patch_embed.bias", s.take("patch_embed.proj.bias")
        for i in range(enc.n_layer):
            yield from timm_block(s, f"blocks.{i}", f"enc.blk.{i}")
        yield "enc.norm.weight", s.take("norm.weight")
        yield "enc.norm.bias", s.take("norm.bias")
        for name in _SKIPPED:
            if s.has(name):
                s.skip(name)
