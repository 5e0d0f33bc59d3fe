"""jepa-convert: checkpoints (HF safetensors, timm safetensors, Meta .pt, LeWM weights.pt) to jepa GGUF files.

One small converter class per source layout, registered by family (see `base.Converter`); a family
may have several layouts (levjepa: timm_vit and levjepa_hf), detection deciding.
Needs the `convert` extra (gguf, safetensors); torch only for converters that read .pt files."""

from __future__ import annotations

import os
from pathlib import Path

from ..gguf.keys import FAMILIES as FILE_FAMILIES

# What --family names: the file families, and vjepa2_ac (a vjepa2 file with an ac predictor).
CONVERTER_FAMILIES = (*FILE_FAMILIES, "vjepa2_ac")
FAMILIES = ("auto", *CONVERTER_FAMILIES)  # what --family takes


def convert(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    family: str = "auto",
    ftype: str = "f32",
    name: str | None = None,
    n_head: int | None = None,
    license: str | None = None,
    source_url: str | None = None,
    description: str | None = None,
    img_size: int | None = None,
    head_dim: int | None = None,
    pred_n_head: int | None = None,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_seq_len: int | None = None,
) -> str:
    """Convert the checkpoint at `src` (a directory, a .safetensors or a .pt file) to the GGUF file `out`."""
    from . import bert, hf_vit, levjepa_hf, lewm, timm_vit, vjepa2, vjepa2_1, vjepa2_ac  # noqa: F401 - importing registers the converters
    from .base import Options, pick

    path = Path(src)
    if not path.exists():
        raise ValueError(f"{path}: no such file or directory")
    opts = Options(name=name, n_head=n_head, license=license, source_url=source_url, description=description,
                   img_size=img_size, head_dim=head_dim, pred_n_head=pred_n_head, pooling=pooling,
                   normalize=normalize, max_seq_len=max_seq_len)
    return pick(path, family)(path, opts).convert(Path(out), ftype)
