"""A tiny random-weight ViT in GGUF form, so tests, examples and `jepa-server --demo` run with no download.

It is an hfvit-family encoder (CLS, separate q/k/v, learned positions) whose weights come from numpy
alone, deterministic for a seed. It is not a trained model: its embeddings mean nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .gguf.tensors import Expected

DEMO_NAME = "jepa-demo (random weights, not a trained model)"
DEMO_DESCRIPTION = (
    "Tiny ViT with random weights written by jepa.demo for tests and demos; "
    "not a trained model, its embeddings carry no meaning."
)
DEMO_FILE = "demo-vit.gguf"
# Bump when the demo's contents change, so a stale cached file is never served (the file name,
# which is the served model id, stays the same).
DEMO_VERSION = "v1"


def _demo_tensors(
    table: Mapping[str, Expected], rng: np.random.Generator
) -> Iterator[tuple[str, np.ndarray]]:
    """The schema's tensor table in its order, scaled like a freshly initialised ViT, with norms perturbed
    so a wrong norm would show."""
    from .gguf.tensors import Role

    for name, e in table.items():
        if e.role == Role.GAIN:
            v = 1.0 + rng.standard_normal(e.shape) * 0.05
        else:  # Linear weights, tokens, positions and biases alike
            v = rng.standard_normal(e.shape) * 0.02
        yield name, v.astype(np.float32)


# Sizes as keyword arguments, like the random writers' (jepa/testing/random_world.py says why).
def write_demo_model(
    path: str | os.PathLike[str], *, embed_dim: int = 192, n_layer: int = 4, n_head: int = 3,
    patch_size: int = 16, img_size: int = 224, seed: int = 0, ftype: str = "f32",
) -> str:
    """Write the demo model to `path` (atomically) and return the path as a string."""
    # gguf is an extra (jepa[convert]): imported here so `import jepa.demo` stays light.
    from .convert.recipes import HF_VIT_RECIPE, hf_vit_encoder
    from .gguf.schema import Meta
    from .gguf.writer import write_gguf

    enc = hf_vit_encoder(embed_dim, n_layer, n_head, patch_size, img_size)
    meta = Meta(family="hfvit", name=DEMO_NAME, description=DEMO_DESCRIPTION, license="MIT")
    tensors = _demo_tensors(enc.table(), np.random.default_rng(seed))
    recipe = replace(HF_VIT_RECIPE, resize_short=img_size, crop=img_size)
    return write_gguf(path, meta, enc, recipe, tensors, ftype=ftype)


def cache_dir() -> Path:
    """$JEPA_CACHE_DIR, else ~/.cache/jepa."""
    env = os.environ.get("JEPA_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "jepa"


def demo_model_path() -> str:
    """Path of the default demo model, written on first use. Safe under concurrent callers: the file
    appears by an atomic rename, and every writer writes the same bytes."""
    path = cache_dir() / DEMO_VERSION / DEMO_FILE
    if not path.is_file():
        write_demo_model(path)
    return str(path)
