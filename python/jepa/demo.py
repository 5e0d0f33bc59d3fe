"""A tiny random-weight ViT in GGUF form, so tests, examples and `jepa-server --demo` run with no download.

It is an hfvit-family encoder (CLS, separate q/k/v, learned positions) whose weights come from numpy
alone, deterministic for a seed. It is not a trained model: its embeddings mean nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

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
    rng: np.random.Generator, d: int, f: int, n_layer: int, pix: int, n_pos: int
) -> Iterator[tuple[str, np.ndarray]]:
    # Scales like a freshly initialised ViT, with norms perturbed so a wrong norm would show.
    def mat(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def gain(n: int) -> np.ndarray:
        return (1.0 + rng.standard_normal(n) * 0.05).astype(np.float32)

    def bias(n: int) -> np.ndarray:
        return (rng.standard_normal(n) * 0.02).astype(np.float32)

    yield "enc.patch_embed.weight", mat(d, pix)
    yield "enc.patch_embed.bias", bias(d)
    yield "enc.cls_token", mat(d)
    yield "enc.pos_embed", mat(n_pos, d)
    for i in range(n_layer):
        b = f"enc.blk.{i}."
        yield b + "ln1.weight", gain(d)
        yield b + "ln1.bias", bias(d)
        for m in ("attn_q", "attn_k", "attn_v", "attn_out"):
            yield b + m + ".weight", mat(d, d)
            yield b + m + ".bias", bias(d)
        yield b + "ln2.weight", gain(d)
        yield b + "ln2.bias", bias(d)
        yield b + "ffn_up.weight", mat(f, d)
        yield b + "ffn_up.bias", bias(f)
        yield b + "ffn_down.weight", mat(d, f)
        yield b + "ffn_down.bias", bias(d)
    yield "enc.norm.weight", gain(d)
    yield "enc.norm.bias", bias(d)


def write_demo_model(
    path: str | os.PathLike[str],
    *,
    embed_dim: int = 192,
    n_layer: int = 4,
    n_head: int = 3,
    patch_size: int = 16,
    img_size: int = 224,
    seed: int = 0,
    ftype: str = "f32",
) -> str:
    """Write the demo model to `path` (atomically) and return the path as a string."""
    # gguf is an extra (jepa[convert]): imported here so `import jepa.demo` stays light.
    from .convert.gguf_writer import write_gguf
    from .convert.schema import HF_VIT_RECIPE, Encoder, Meta

    enc = Encoder(
        embed_dim=embed_dim,
        n_layer=n_layer,
        n_head=n_head,
        ffn_dim=4 * embed_dim,
        patch_size=patch_size,
        img_size=img_size,
        ln_eps=1e-12,
        cls_token=True,
    )
    meta = Meta(family="hfvit", name=DEMO_NAME, description=DEMO_DESCRIPTION, license="MIT")
    rng = np.random.default_rng(seed)
    pix = enc.in_chans * patch_size * patch_size
    tensors = _demo_tensors(rng, embed_dim, enc.ffn_dim, n_layer, pix, enc.n_patches + 1)
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
