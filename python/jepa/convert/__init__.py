"""jepa-convert: checkpoints (HF safetensors, timm safetensors) to jepa GGUF files.

One small converter class per source layout, registered by family; see `base.Converter`.
Needs the `convert` extra (gguf, safetensors); torch only for converters that read .pt files."""

from __future__ import annotations
