"""Model and Context: the Python face of the engine's model and context handles."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from . import _engine
from .errors import InvalidInputError, UnsupportedError

_DEVICES = {"cpu": 0, "cuda": 1}


def _parse_device(device: str) -> tuple[int, int]:
    """'cpu', 'cuda' or 'cuda:N' -> (kind, index)."""
    if not isinstance(device, str):
        raise InvalidInputError(f"device must be a string like 'cpu' or 'cuda:0', got {device!r}")
    kind, _, index = device.partition(":")
    if kind not in _DEVICES:
        raise InvalidInputError(f"unknown device {device!r}: use 'cpu', 'cuda' or 'cuda:N'")
    if index and (not index.isdigit() or kind == "cpu"):
        raise InvalidInputError(f"bad device index in {device!r}")
    if kind == "cuda" and not _engine.has_cuda():
        raise UnsupportedError("this build of jepa has no CUDA backend (rebuild with -DJEPA_CUDA=ON)")
    return _DEVICES[kind], int(index or 0)


class Model:
    """A GGUF model loaded once; immutable, shareable by any number of threads."""

    def __init__(self, path: str | os.PathLike[str], device: str = "cpu") -> None:
        kind, index = _parse_device(device)
        self.path = os.fspath(path)
        self.device = device
        self._native = _engine.Model(self.path, kind, index)
        self.info: dict[str, Any] = self._native.info()
        self.labels: list[str] = self._native.labels()

    def __repr__(self) -> str:
        i = self.info
        return (
            f"Model({os.path.basename(self.path)!r}, family={i['family']}, dim={i['embed_dim']}, "
            f"layers={i['n_layer']}, backend={i['backend']})"
        )

    @property
    def embed_dim(self) -> int:
        return int(self.info["embed_dim"])

    @property
    def has_cls(self) -> bool:
        return bool(self.info["has_cls"])

    @property
    def n_prefix(self) -> int:
        """Tokens before the patch tokens: CLS and registers."""
        return int(self.info["has_cls"]) + int(self.info["n_registers"])

    def n_tokens(self, frames: int = 1, height: int | None = None, width: int | None = None) -> int:
        """Tokens one item encodes to (CLS + registers + patches)."""
        size = int(self.info["img_size"])
        return int(self._native.n_tokens(frames, height or size, width or size))

    def context(
        self, threads: int | None = None, max_batch: int = 32, flash_attn: bool | None = None
    ) -> Context:
        return Context(self, threads=threads, max_batch=max_batch, flash_attn=flash_attn)


class Context:
    """Per-thread working state over a Model. Use one Context from one thread at a time."""

    def __init__(
        self, model: Model, threads: int | None = None, max_batch: int = 32, flash_attn: bool | None = None
    ) -> None:
        if not isinstance(model, Model):
            raise InvalidInputError("Context needs a jepa.Model")
        fa = -1 if flash_attn is None else int(bool(flash_attn))
        self.model = model
        self._native = _engine.Context(model._native, int(threads or 0), int(max_batch), fa)

    @property
    def threads(self) -> int:
        return int(self._native.n_threads)

    @threads.setter
    def threads(self, n: int) -> None:
        self._native.set_threads(int(n))

    @property
    def max_batch(self) -> int:
        return int(self._native.max_batch)

    @max_batch.setter
    def max_batch(self, n: int) -> None:
        self._native.set_max_batch(int(n))

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Encode float32 images [B, C, H, W] or clips [B, C, T, H, W] -> tokens [B, N, D].

        Inputs are already preprocessed (see jepa.media). The GIL is released while it runs."""
        if not isinstance(x, np.ndarray):
            raise InvalidInputError(f"encode expects a numpy array, got {type(x).__name__}")
        if x.dtype != np.float32:
            raise InvalidInputError(f"encode expects float32 pixels, got {x.dtype}")
        if x.ndim == 4:
            x = x[:, :, None]
        elif x.ndim != 5:
            raise InvalidInputError(
                f"encode expects [B, C, H, W] images or [B, C, T, H, W] clips, got shape {list(x.shape)}"
            )
        return self._native.encode(np.ascontiguousarray(x))
