"""jepa-convert: checkpoints (HF safetensors, timm safetensors, Meta .pt) to jepa GGUF files.

One small converter class per source layout, registered by family (see `base.Converter`).
Needs the `convert` extra (gguf, safetensors); torch only for converters that read .pt files."""

from __future__ import annotations

import os
from pathlib import Path

FAMILIES = ("auto", "hfvit", "ijepa", "levjepa", "vjepa2")


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
) -> str:
    """Convert the checkpoint at `src` (a directory, a .safetensors or a .pt file) to the GGUF file `out`."""
    from . import hf_vit, timm_vit, vjepa2  # noqa: F401 - importing registers the converters
    from .base import Options, pick

    path = Path(src)
    if not path.exists():
        raise ValueError(f"{path}: no such file or directory")
    opts = Options(name=name, n_head=n_head, license=license, source_url=source_url, description=description)
    return pick(path, family)(path, opts).convert(out, ftype)
