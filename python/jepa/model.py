"""Model and Context: the Python face of the engine's model and context handles.

A Context's methods are the engine's network calls, one to one with the C API (jepa.h): encode,
classify, predict (the masked predictor), world_latents and world_predict (every world model, by
its predictor kind). Rollouts and planners over them are jepa.world's."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, cast, overload

import numpy as np

from . import _engine
from ._engine import HeadKind, ModelInfo, Pooling, PredictorKind
from .errors import InvalidInputError, UnsupportedError

if TYPE_CHECKING:
    from .tokenizer import TextTokenizer, Tokens

# The engine's defaults (jepa_context_default_params / jepa_predict_default_params): one source.
CONTEXT_DEFAULTS = _engine.context_default_params()
PREDICT_DEFAULTS = _engine.predict_default_params()
WORLD_ROLLOUT_DEFAULTS = _engine.world_rollout_default_params()

_DEVICES = {"cpu": 0, "cuda": 1}


def parse_device(device: str) -> tuple[int, int]:
    """'cpu', 'cuda' or 'cuda:N' -> (kind, index), the engine's jepa_device and device ordinal.
    InvalidInputError for a name that is none of these, UnsupportedError for CUDA in a CPU build."""
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


def device_memory(device: str) -> tuple[int, int]:
    """(free, total) bytes of a device ('cpu', 'cuda:N') as its backend reports them now
    (jepa_device_memory); a CUDA device that does not exist is refused naming "device"."""
    kind, index = parse_device(device)
    free, total = _engine.device_memory(kind, index)
    return int(free), int(total)


def default_device() -> str:
    """The device a Model loads on when none is named: $JEPA_DEVICE ('cpu', 'cuda', 'cuda:N'), else 'cpu'.
    .ci/gpu_check.sh runs the parity suites on a GPU this way, unchanged."""
    return os.environ.get("JEPA_DEVICE", "").strip() or "cpu"



def world_model_name(pred_kind: PredictorKind) -> str:
    """A world-model predictor's kind as the file spells it (jepa.pred.kind, the key of its
    jepa.world_kinds record), or "" for none: no predictor, or the masked one (Context.predict)."""
    return "" if pred_kind in (PredictorKind.NONE, PredictorKind.MASKED) else pred_kind.name.lower()


class Model:
    """A GGUF model loaded once; immutable, shareable by any number of threads."""

    def __init__(self, path: str | os.PathLike[str], device: str | None = None, *, mmap: bool = True) -> None:
        """Load `path` on `device`. On the CPU the file is memory-mapped (`mmap=True`): the tensors
        the engine uses as stored stay in the page cache, shared by every process serving the file
        (`info.n_bytes_mapped` of `info.n_bytes`); only the matrices the engine repacks get a copy.
        `mmap=False` reads every tensor into memory of the model's own (a file that may be rewritten
        in place while it is served needs that)."""
        if device is None:
            device = default_device()
        kind, index = parse_device(device)
        self.path = os.fspath(path)
        self.device = device
        self._native = _engine.Model(self.path, kind, index, mmap)
        self.info: ModelInfo = self._native.info()
        self.labels: list[str] = self._native.labels()
        self._tokenizer: TextTokenizer | None = None

    def __repr__(self) -> str:
        i = self.info
        return (
            f"Model({os.path.basename(self.path)!r}, family={i.family}, dim={i.embed_dim}, "
            f"layers={i.n_layer}, backend={i.backend})"
        )

    @property
    def embed_dim(self) -> int:
        return self.info.embed_dim

    @property
    def has_cls(self) -> bool:
        return self.info.has_cls

    @property
    def has_head(self) -> bool:
        """Whether the file holds a classifier head (Context.classify, jepa.classify)."""
        return self.info.head_kind != HeadKind.NONE

    @property
    def has_predictor(self) -> bool:
        """Whether the file holds a masked predictor (Context.predict); world models: `world_model`."""
        return self.info.pred_kind == PredictorKind.MASKED

    @property
    def world_model(self) -> str:
        """The world-model kind the file's predictor is (its record in jepa.world_kinds), or "" for none."""
        return world_model_name(self.info.pred_kind)

    @property
    def n_prefix(self) -> int:
        """Tokens before the patch tokens: CLS and registers."""
        return int(self.info.has_cls) + self.info.n_registers

    @property
    def is_text(self) -> bool:
        """Whether this is a text model (family bert): Context.encode_text, jepa.text."""
        return self.info.modality == "text"

    def file_changed(self) -> str | None:
        """Why the file this model maps changed since it was loaded (truncated, rewritten in place, or a
        read of the mapping faulted), or None. Every call on such a model raises ModelFileError until
        the file is loaded again: replace model files by rename, never in place."""
        return self._native.file_changed()

    @property
    def tokenizer(self) -> TextTokenizer:
        """The file's own tokenizer (a text model's; UnsupportedError for the others), built once."""
        if self._tokenizer is None:
            from .tokenizer import TextTokenizer, require_text  # HF tokenizers loads on first use

            require_text(self.info.modality)
            info = self.info
            self._tokenizer = TextTokenizer(self._native.tokenizer(), info.max_seq_len, info.vocab_size)
        return self._tokenizer

    def n_tokens(self, frames: int = 1, height: int | None = None, width: int | None = None) -> int:
        """Tokens one item encodes to (CLS + registers + patches)."""
        size = self.info.img_size
        return int(self._native.n_tokens(self.info.in_chans, frames, height or size, width or size))

    def context(
        self,
        threads: int | None = None,
        max_batch: int = CONTEXT_DEFAULTS.max_batch,
        flash_attn: bool | None = None,
        max_graph_bytes: int = CONTEXT_DEFAULTS.max_graph_bytes,
        max_output_bytes: int | None = None,
    ) -> Context:
        """Context(self, ...): its signature repeated on purpose so the call stays typed and
        documented (`duplicates` pairs the two)."""
        return Context(
            self, threads=threads, max_batch=max_batch, flash_attn=flash_attn,
            max_graph_bytes=max_graph_bytes, max_output_bytes=max_output_bytes,
        )


class _EngineSetting:
    """A Context attribute that reads the native context's param `name` and, when `setter` names the
    engine's call for it, sets it through that call (so the engine checks the value)."""

    def __init__(self, name: str, setter: str | None = None) -> None:
        self.name, self.setter = name, setter

    def __get__(self, ctx: Context | None, owner: type | None = None) -> int:
        if ctx is None:
            raise AttributeError(self.name)
        return int(getattr(ctx._native, self.name))

    def __set__(self, ctx: Context, value: int) -> None:
        if self.setter is None:
            raise AttributeError(f"{self.name} is fixed when the context is made")
        getattr(ctx._native, self.setter)(int(value))


class Context:
    """Per-thread working state over a Model. Use one Context from one thread at a time."""

    def __init__(
        self,
        model: Model,
        threads: int | None = None,
        max_batch: int = CONTEXT_DEFAULTS.max_batch,
        flash_attn: bool | None = None,
        max_graph_bytes: int = CONTEXT_DEFAULTS.max_graph_bytes,
        max_output_bytes: int | None = None,
    ) -> None:
        """flash_attn: None lets the engine choose (flash everywhere; on a CPU with AVX-512 "flash" is the
        engine's own attention kernel); False keeps ggml's matmul + softmax + matmul graph.
        max_graph_bytes: cap on one graph's compute buffer; a call needing more is split into smaller
        batches, or refused (ResourceLimitError) when one item alone needs more. 0: no cap.
        max_output_bytes: cap on one call's output; a call whose output would take more is refused
        (ResourceLimitError, param "max_output_bytes") before anything is allocated. None: the engine's
        default, a quarter of the machine's memory (or of its cgroup limit); 0: no cap."""
        if not isinstance(model, Model):
            raise InvalidInputError("Context needs a jepa.Model")
        fa = CONTEXT_DEFAULTS.flash_attn if flash_attn is None else int(bool(flash_attn))
        self.model = model
        self._native = _engine.Context(
            model._native, int(threads or CONTEXT_DEFAULTS.n_threads), int(max_batch), fa,
            int(max_graph_bytes), None if max_output_bytes is None else int(max_output_bytes),
        )

    # The context's settings are the engine's: read from its params, set through its own calls
    # (jepa_context_set_threads / _set_max_batch), which check them.
    threads = _EngineSetting("n_threads", "set_threads")
    max_batch = _EngineSetting("max_batch", "set_max_batch")
    max_graph_bytes = _EngineSetting("max_graph_bytes")
    max_output_bytes = _EngineSetting("max_output_bytes")

    def encode(self, x: np.ndarray, levels: bool = False, ids: np.ndarray | None = None) -> np.ndarray:
        """Encode float32 images [B, C, H, W] or clips [B, C, T, H, W] -> tokens [B, N, D].

        levels: every output level side by side, [B, N, L * D] with level k at features
        [k * D, (k + 1) * D) (V-JEPA 2.1's return_hierarchical; model.info.n_levels is L, the last
        level is what levels=False returns, bit for bit); refused for a one-level model.
        ids: the masked encoder (V-JEPA 2 / 2.1, upstream's encoder(x, masks=ids)): only the tokens at
        these ids ([n] for every item or [B, n], on the input's token grid) go through the blocks, at
        their own positions; the result is [B, n, D] in ids order, what the predictor's context is.
        Inputs are already preprocessed (see jepa.media). The GIL is released while it runs."""
        if not isinstance(x, np.ndarray):
            raise InvalidInputError(f"encode expects a numpy array, got {type(x).__name__}")
        if self.model.is_text:
            raise UnsupportedError(
                "this is a text model (jepa.modality text): it encodes token ids (encode_text, jepa.text), "
                "not pixels", param="pixels",
            )
        if x.dtype != np.float32:
            raise InvalidInputError(f"encode expects float32 pixels, got {x.dtype}")
        if x.ndim == 4:
            x = x[:, :, None]
        elif x.ndim != 5:
            raise InvalidInputError(
                f"encode expects [B, C, H, W] images or [B, C, T, H, W] clips, got shape {list(x.shape)}"
            )
        keep = None if ids is None else _ids(ids, x.shape[0], "ids")
        return self._native.encode(np.ascontiguousarray(x), bool(levels), keep)

    def encode_memory(self, shape: Sequence[int]) -> int:
        """The compute buffer, in bytes, `encode` of pixels of this shape ([B, C, H, W] or [B, C, T, H,
        W]) takes on this context, measured without computing: the memory per clip to budget, and the
        number `max_graph_bytes` is checked against (a batch over max_batch runs in max_batch chunks)."""
        dims = [int(d) for d in shape]
        if len(dims) == 4:
            dims.insert(2, 1)
        if len(dims) != 5:
            raise InvalidInputError(f"encode_memory expects a shape [B, C, T, H, W] or [B, C, H, W]: {dims}")
        return int(self._native.encode_memory(dims))

    def classify(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Encoder tokens [B, N, D] (what `encode` returns) -> (logits [B, n_classes], pooled [B, D]).

        Runs the model's attentive-pool head; `model.labels[i]` names class i. Softmax and top-k are
        left to the caller (see jepa.classify)."""
        tokens = _float_array(tokens, "classify", "tokens")
        if tokens.ndim != 3:
            raise InvalidInputError(f"classify expects tokens [B, N, D], got shape {list(tokens.shape)}")
        logits, pooled = self._native.classify(tokens)
        return logits, pooled

    @overload
    def predict(
        self, tokens: np.ndarray, context_ids: np.ndarray, target_ids: np.ndarray, *, gathered: bool = ...,
        mask_index: int = ..., grid: tuple[int, int] | None = ..., modality: str = ...,
        return_context: Literal[False] = ...,
    ) -> np.ndarray: ...

    @overload
    def predict(
        self, tokens: np.ndarray, context_ids: np.ndarray, target_ids: np.ndarray, *, gathered: bool = ...,
        mask_index: int = ..., grid: tuple[int, int] | None = ..., modality: str = ...,
        return_context: Literal[True],
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def predict(
        self,
        tokens: np.ndarray,
        context_ids: np.ndarray,
        target_ids: np.ndarray,
        *,
        gathered: bool = False,
        mask_index: int = PREDICT_DEFAULTS.mask_index,
        grid: tuple[int, int] | None = None,
        modality: str = "video",
        return_context: bool = False,
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """The masked predictor's predictions [B, Nt, W] at `target_ids`, from the context tokens
        (W: the encoder width D, or a V-JEPA 2.1 predictor's own, model.info.pred_out_dim).

        tokens: [B, N, D], the encoder output for the whole clip (what `encode` returns): the context
        rows are taken at `context_ids`, as transformers' VJEPA2Model does. With gathered=True, tokens
        are already the context rows [B, Nc, D], in the order of context_ids (an encoder that saw the
        context only). Ids are token indices on the encoder grid (T-major, then H, then W), [Nc] / [Nt]
        for every item or [B, Nc] / [B, Nt] per item. mask_index picks the learned mask token (upstream
        default 1); grid (h, w) is the patch grid the ids index (default: the model's native grid).
        V-JEPA 2.1: a g/G predictor reads the four levels (`encode(x, levels=True)`, D = 4 x width);
        modality "image" adds the image modality vector instead of the clip's; return_context=True
        also returns the context rows through the context projection, (x_pred, x_context) as upstream."""
        tokens = _float_array(tokens, "predict", "tokens")
        if tokens.ndim != 3:
            raise InvalidInputError(f"predict expects tokens [B, N, D], got shape {list(tokens.shape)}")
        if modality not in ("video", "image"):
            message = f"modality must be 'video' or 'image', got {modality!r}"
            raise InvalidInputError(message, param="modality")
        b = tokens.shape[0]
        ctx = _ids(context_ids, b, "context_ids")
        tgt = _ids(target_ids, b, "target_ids")
        if not gathered:
            # The gather is this layer's own step: its range is checked here, the grid's by the engine.
            n = tokens.shape[1]
            if ctx.min() < 0 or ctx.max() >= n:
                bad = int(ctx.min()) if ctx.min() < 0 else int(ctx.max())
                message = f"context id {bad} is out of range for {n} tokens"
                raise InvalidInputError(message, param="context_ids")
            tokens = np.take_along_axis(tokens, ctx[:, :, None].astype(np.int64), axis=1)
        elif tokens.shape[1] != ctx.shape[1]:
            raise InvalidInputError(
                f"gathered tokens have {tokens.shape[1]} rows but there are {ctx.shape[1]} context ids",
                param="tokens",
            )
        gh, gw = grid if grid is not None else (PREDICT_DEFAULTS.grid_h, PREDICT_DEFAULTS.grid_w)
        out = self._native.predict(
            np.ascontiguousarray(tokens), ctx, tgt, int(mask_index), int(gh), int(gw), modality == "image",
            bool(return_context),
        )
        if return_context:
            pred, context = out
            return pred, context
        return cast(np.ndarray, out)

    # ---- world models: one pair of calls for every predictor kind (jepa_world_*) ---------------

    def encode_text(
        self, seqs: Sequence[Tokens], pool: Pooling | None = None, normalize: bool | None = None
    ) -> np.ndarray:
        """Tokenized texts (jepa.text.Tokens) -> float32 [n, D], pooled as the file says unless `pool`
        overrides it, then L2-normalised when the file (or `normalize`) says; pool Pooling.NONE gives
        every token's vector, [sum of lengths, D]. One engine call, the texts laid end to end without
        padding; a text's result does not depend on the others (bit for bit on the CPU)."""
        if not seqs:
            raise InvalidInputError("encode_text needs at least one text", param="input")
        info = self.model.info
        mode = info.pooling if pool is None else pool
        norm = info.text_normalize if normalize is None else bool(normalize)
        ids = np.concatenate([s.ids for s in seqs]).astype(np.int32, copy=False)
        types = np.concatenate([s.type_ids for s in seqs]).astype(np.int32, copy=False)
        lens = np.array([len(s) for s in seqs], np.int32)
        return self._native.encode_text(ids, lens, types, int(mode), norm)

    def world_latents(self, tokens: np.ndarray) -> np.ndarray:
        """Encoder tokens [B, N, E] (what `encode` returns) -> the latents the world model's
        predictor takes: V-JEPA 2-AC [B, N, E] (every token through the non-affine LayerNorm, in
        float64 as upstream), LeWM [B, 1, D] (the CLS through the projector)."""
        tokens = _float_array(tokens, "world_latents", "tokens")
        if tokens.ndim != 3:
            raise InvalidInputError(
                f"world_latents expects tokens [B, N, E], got shape {list(tokens.shape)}", param="tokens"
            )
        return self._native.world_latents(tokens)

    @overload
    def world_predict(
        self, latents: np.ndarray, actions: np.ndarray, states: np.ndarray | None = ...,
        *, taps: Literal[False] = ...,
    ) -> np.ndarray: ...

    @overload
    def world_predict(
        self, latents: np.ndarray, actions: np.ndarray, states: np.ndarray | None = ...,
        *, taps: Literal[True],
    ) -> dict[str, np.ndarray]: ...

    def world_predict(
        self,
        latents: np.ndarray,
        actions: np.ndarray,
        states: np.ndarray | None = None,
        *,
        taps: bool = False,
    ) -> np.ndarray | dict[str, np.ndarray]:
        """One predictor pass: latents [B, T*P, D] (P rows per step: a frame's HW tokens for AC, 1 for
        LeWM), actions [B, T, A], states [B, T, S] (AC; None for LeWM) -> predictions [B, T*P, D], row
        block t predicting step t + 1. taps=True (LeWM) returns {"pred", "pred_raw" (before the
        predictor's projector), "act_emb" (the action embedder's output)}. Widths, window and grid
        are the engine's to check; a refusal names the argument (`exc.param`)."""
        z = _float_array(latents, "world_predict", "latents")
        a = _float_array(actions, "world_predict", "actions")
        s = None if states is None else _float_array(states, "world_predict", "states")
        for name, arr in (("latents", z), ("actions", a), ("states", s)):
            if arr is not None and arr.ndim != 3:
                raise InvalidInputError(
                    f"world_predict expects {name} with 3 dimensions, got shape {list(arr.shape)}", param=name
                )
        if not taps:
            return self._native.world_predict(z, a, s, False)
        pred, raw, act = self._native.world_predict(z, a, s, True)
        return {"pred": pred, "pred_raw": raw, "act_emb": act}

    def world_rollout(
        self,
        context: np.ndarray,
        actions: np.ndarray,
        states: np.ndarray,
        *,
        cache: bool = bool(WORLD_ROLLOUT_DEFAULTS.cache),
    ) -> np.ndarray:
        """A whole V-JEPA 2-AC rollout in one call: context [P, D] (the current frame's latents,
        shared by every candidate), actions [K, H, A], states [K, H, S] (the pose at each step) ->
        frames [K, H, P, D], frame h + 1 = step h's prediction through the non-affine LayerNorm, as
        upstream's loop over `world_predict` gives it (jepa.planning.ac_rollout).

        cache=True keeps each layer's keys and values per candidate and computes only the new frame
        at each step (H frame blocks instead of H (H + 1) / 2; the cache takes 2 x pred_n_layer x
        (H - 1) x (2 + P) x pred_embed_dim floats per candidate of a graph, within max_graph_bytes);
        cache=False recomputes every prefix. The same bits either way on the CPU's own kernels."""
        z = _float_array(context, "world_rollout", "context")
        a = _float_array(actions, "world_rollout", "actions")
        s = _float_array(states, "world_rollout", "states")
        for name, arr, nd in (("context", z, 2), ("actions", a, 3), ("states", s, 3)):
            if arr.ndim != nd:
                raise InvalidInputError(
                    f"world_rollout expects {name} with {nd} dimensions, got shape {list(arr.shape)}",
                    param=name,
                )
        return self._native.world_rollout(z, a, s, bool(cache))



def _float_array(x: np.ndarray, what: str, name: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        got = type(x).__name__
        raise InvalidInputError(f"{what} expects a numpy array for {name}, got {got}", param=name)
    if x.dtype != np.float32:
        raise InvalidInputError(f"{what} expects float32 {name}, got {x.dtype}", param=name)
    return np.ascontiguousarray(x)


def _ids(ids: np.ndarray, batch: int, name: str) -> np.ndarray:
    """Token ids as int32 [batch, n]: one row for every item, or one per item."""
    a = np.asarray(ids)
    if a.dtype.kind not in "iu" or a.ndim not in (1, 2) or a.size == 0:
        raise InvalidInputError(
            f"{name} must be a non-empty integer array [n] or [B, n], got {a.dtype} {list(a.shape)}",
            param=name,
        )
    # int32 is the engine's id type: an id outside it would wrap in the cast. The model's own range
    # is the engine's check (jepa_predict).
    if a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max:
        raise InvalidInputError(f"{name} must fit in int32", param=name)
    if a.ndim == 1:
        a = np.broadcast_to(a, (batch, a.shape[0]))
    elif a.shape[0] != batch:
        raise InvalidInputError(f"{name} has {a.shape[0]} rows for a batch of {batch}", param=name)
    return np.ascontiguousarray(a, dtype=np.int32)
