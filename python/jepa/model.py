"""Model and Context: the Python face of the engine's model and context handles."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from . import _engine, world
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


def default_device() -> str:
    """The device a Model loads on when none is named: $JEPA_DEVICE ('cpu', 'cuda', 'cuda:N'), else 'cpu'.
    tools/gpu_check.sh runs the parity suites on a GPU this way, unchanged."""
    return os.environ.get("JEPA_DEVICE", "").strip() or "cpu"


class Model:
    """A GGUF model loaded once; immutable, shareable by any number of threads."""

    def __init__(self, path: str | os.PathLike[str], device: str | None = None) -> None:
        if device is None:
            device = default_device()
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
    def has_head(self) -> bool:
        """Whether the file holds a classifier head (Context.classify, jepa.classify)."""
        return bool(self.info["has_head"])

    @property
    def has_predictor(self) -> bool:
        """Whether the file holds a masked predictor (Context.predict)."""
        return bool(self.info["has_predictor"]) and self.info.get("pred_kind") == "masked"

    @property
    def world_model(self) -> str:
        """The world-model predictor the file holds: "lewm", "ac", or "" for none."""
        kind = str(self.info.get("pred_kind", ""))
        return kind if kind in ("lewm", "ac") else ""

    @property
    def n_prefix(self) -> int:
        """Tokens before the patch tokens: CLS and registers."""
        return int(self.info["has_cls"]) + int(self.info["n_registers"])

    def n_tokens(self, frames: int = 1, height: int | None = None, width: int | None = None) -> int:
        """Tokens one item encodes to (CLS + registers + patches)."""
        size = int(self.info["img_size"])
        return int(self._native.n_tokens(frames, height or size, width or size))

    def context(
        self,
        threads: int | None = None,
        max_batch: int = 32,
        flash_attn: bool | None = None,
        max_graph_bytes: int = 0,
    ) -> Context:
        return Context(
            self, threads=threads, max_batch=max_batch, flash_attn=flash_attn, max_graph_bytes=max_graph_bytes
        )


class Context:
    """Per-thread working state over a Model. Use one Context from one thread at a time."""

    def __init__(
        self,
        model: Model,
        threads: int | None = None,
        max_batch: int = 32,
        flash_attn: bool | None = None,
        max_graph_bytes: int = 0,
    ) -> None:
        """flash_attn: None lets the engine choose (flash everywhere; on a CPU with AVX-512 "flash" is the
        engine's own attention kernel); False keeps ggml's matmul + softmax + matmul graph.
        max_graph_bytes: cap on one graph's compute buffer; a call needing more is split into smaller
        batches, or refused (ResourceLimitError) when one item alone needs more. 0: no cap."""
        if not isinstance(model, Model):
            raise InvalidInputError("Context needs a jepa.Model")
        fa = -1 if flash_attn is None else int(bool(flash_attn))
        self.model = model
        self._native = _engine.Context(
            model._native, int(threads or 0), int(max_batch), fa, int(max_graph_bytes)
        )

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

    @property
    def max_graph_bytes(self) -> int:
        return int(self._native.max_graph_bytes)

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

    def classify(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Encoder tokens [B, N, D] (what `encode` returns) -> (logits [B, n_classes], pooled [B, D]).

        Runs the model's attentive-pool head; `model.labels[i]` names class i. Softmax and top-k are
        left to the caller (see jepa.classify)."""
        if not self.model.has_head:
            raise UnsupportedError(f"{self.model!r} has no classifier head")
        tokens = _float_array(tokens, "classify", "tokens")
        if tokens.ndim != 3:
            raise InvalidInputError(f"classify expects tokens [B, N, D], got shape {list(tokens.shape)}")
        logits, pooled = self._native.classify(tokens)
        return logits, pooled

    def predict(
        self,
        tokens: np.ndarray,
        context_ids: np.ndarray,
        target_ids: np.ndarray,
        *,
        gathered: bool = False,
        mask_index: int = 1,
        grid: tuple[int, int] | None = None,
    ) -> np.ndarray:
        """The masked predictor's predictions [B, Nt, D] at `target_ids`, from the context tokens.

        tokens: [B, N, D], the encoder output for the whole clip (what `encode` returns): the context
        rows are taken at `context_ids`, as transformers' VJEPA2Model does. With gathered=True, tokens
        are already the context rows [B, Nc, D], in the order of context_ids (an encoder that saw the
        context only). Ids are token indices on the encoder grid (T-major, then H, then W), [Nc] / [Nt]
        for every item or [B, Nc] / [B, Nt] per item. mask_index picks the learned mask token (upstream
        default 1); grid (h, w) is the patch grid the ids index (default: the model's native grid)."""
        if not self.model.has_predictor:
            raise UnsupportedError(f"{self.model!r} has no masked predictor")
        tokens = _float_array(tokens, "predict", "tokens")
        if tokens.ndim != 3:
            raise InvalidInputError(f"predict expects tokens [B, N, D], got shape {list(tokens.shape)}")
        b = tokens.shape[0]
        ctx = _ids(context_ids, b, "context_ids")
        tgt = _ids(target_ids, b, "target_ids")
        if not gathered:
            n = tokens.shape[1]
            if ctx.max() >= n:
                raise InvalidInputError(f"context id {int(ctx.max())} is out of range for {n} tokens")
            tokens = np.take_along_axis(tokens, ctx[:, :, None].astype(np.int64), axis=1)
        elif tokens.shape[1] != ctx.shape[1]:
            raise InvalidInputError(
                f"gathered tokens have {tokens.shape[1]} rows but there are {ctx.shape[1]} context ids"
            )
        gh, gw = grid if grid is not None else (0, 0)
        return self._native.predict(
            np.ascontiguousarray(tokens), ctx, tgt, int(mask_index), int(gh), int(gw)
        )


    # ---- world models (jepa.world) ------------------------------------------------------------

    def lewm_embed(self, pixels: np.ndarray) -> np.ndarray:
        """LeWM: frames [N, 3, S, S] -> embeddings [N, D] (CLS through the projector)."""
        return world.lewm_embed(self, pixels)

    def lewm_project(self, cls: np.ndarray) -> np.ndarray:
        """LeWM: CLS rows [N, E] of encoder tokens -> embeddings [N, D] (the 'lewm' pool)."""
        return world.lewm_project(self, cls)

    def lewm_predict(self, embs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """LeWM: embeddings [B, T, D], actions [B, T, A] -> predictions [B, T, D]."""
        return world.lewm_predict(self, embs, actions)

    def lewm_predict_parts(self, embs: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
        """LeWM: lewm_predict with the pred_raw and act_emb taps."""
        return world.lewm_predict_parts(self, embs, actions)

    def lewm_rollout(self, history: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """LeWM: history [Hh, D], actions [K, T, A] -> `JEPA.rollout`'s predicted_emb [K, T + 1, D]."""
        return world.lewm_rollout(self, history, actions)

    def lewm_cost(self, history: np.ndarray, goal: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """LeWM: `JEPA.get_cost` of actions [K, T, A] -> [K]."""
        return world.lewm_cost(self, history, goal, actions)

    def lewm_plan(self, history: np.ndarray, goal: np.ndarray, **options: Any) -> dict[str, Any]:
        """LeWM: the CEM plan (see jepa.world.lewm_plan for the options)."""
        return world.lewm_plan(self, history, goal, **options)

    def ac_encode(self, frames: np.ndarray) -> np.ndarray:
        """V-JEPA 2-AC: frames [N, 3, S, S] -> normalised latents [N, HW, D]."""
        return world.ac_encode(self, frames)

    def ac_predict(self, latents: np.ndarray, actions: np.ndarray, states: np.ndarray) -> np.ndarray:
        """V-JEPA 2-AC: latents [B, T*HW, D], actions and states [B, T, 7] -> [B, T*HW, D]."""
        return world.ac_predict(self, latents, actions, states)

    def ac_rollout(
        self,
        context: np.ndarray,
        state: np.ndarray,
        actions: np.ndarray,
        goal: np.ndarray | None = None,
        return_latents: bool = False,
    ) -> dict[str, np.ndarray]:
        """V-JEPA 2-AC: K rollouts of actions [K, H, 7] from context [HW, D] and state [7]."""
        return world.ac_rollout(self, context, state, actions, goal, return_latents)

    def ac_plan(
        self, context: np.ndarray, state: np.ndarray, goal: np.ndarray, **options: Any
    ) -> dict[str, Any]:
        """V-JEPA 2-AC: Meta's CEM plan (see jepa.world.ac_plan for the options and defaults)."""
        return world.ac_plan(self, context, state, goal, **options)


def _float_array(x: np.ndarray, what: str, name: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise InvalidInputError(f"{what} expects a numpy array for {name}, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise InvalidInputError(f"{what} expects float32 {name}, got {x.dtype}")
    return np.ascontiguousarray(x)


def _ids(ids: np.ndarray, batch: int, name: str) -> np.ndarray:
    """Token ids as int32 [batch, n]: one row for every item, or one per item."""
    a = np.asarray(ids)
    if a.dtype.kind not in "iu" or a.ndim not in (1, 2) or a.size == 0:
        raise InvalidInputError(
            f"{name} must be a non-empty integer array [n] or [B, n], got {a.dtype} {list(a.shape)}"
        )
    if a.min() < 0 or a.max() >= 1 << 24:
        raise InvalidInputError(f"{name} must be in [0, 2^24)")
    if a.ndim == 1:
        a = np.broadcast_to(a, (batch, a.shape[0]))
    elif a.shape[0] != batch:
        raise InvalidInputError(f"{name} has {a.shape[0]} rows for a batch of {batch}")
    return np.ascontiguousarray(a, dtype=np.int32)
