"""jepa: JEPA vision, video and world models on a ggml engine, from GGUF files."""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING

# The engine's worker threads meet at a barrier after every graph node (libgomp's). libgomp spins
# 300k pauses there by default: on a machine where other processes take a core, the waiting thread
# burns the core its partner needs, and a ViT-S/16 image measured 7x slower on 2 threads than on 1
# (380 vs 54 ms). 10k pauses covers a node's imbalance and then sleeps: 66 ms there, and no change
# on a quiet machine (1k measured 3-7 % slower quiet). Read when libgomp loads, so it is set before
# the extension is imported; a value already in the environment wins.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

from .errors import (
    BackendError,
    InvalidInputError,
    JepaError,
    ModelFileError,
    ResourceLimitError,
    UnsupportedError,
)

try:
    from . import _engine
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "jepa's native extension (jepa._engine) is not built. Build it with `pip install .` "
        "(or `make install` in a checkout)."
    ) from exc

from ._engine import (
    HeadKind,
    ModelInfo,
    Pooling,
    PosType,
    PredictorKind,
    Preprocess,
    Resample,
    ResizeMode,
    cpu_kernels,
    default_threads,
    ggml_version,
    has_cuda,
)
from .classify import Classification, classify, classify_prepared
from .model import Context, Model, device_memory, parse_device
from .pipeline import embed, encode_prepared
from .planning import ac_next_state
from .pooling import POOL_MODES, check_pool, default_pool, pool, pool_modes
from .world import plan, rollout

if TYPE_CHECKING:
    from . import text as text

__version__: str = _engine.version()


def engine_file() -> str:
    """The file of the native engine this process loaded: what a benchmark records (with its mtime and
    hash) to tell one build of the engine from another."""
    return str(_engine.__file__)

# Submodules `jepa.<name>` reaches after a plain `import jepa`, imported on first use (PEP 562) so
# that `import jepa` stays light: jepa.text needs HF tokenizers (the `text` extra) once it tokenizes.
_LAZY_SUBMODULES = ("text",)


def __getattr__(name: str) -> ModuleType:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)  # also binds jepa.<name>: called once
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "POOL_MODES",
    "BackendError",
    "Classification",
    "Context",
    "HeadKind",
    "InvalidInputError",
    "JepaError",
    "Model",
    "ModelFileError",
    "ModelInfo",
    "Pooling",
    "PosType",
    "PredictorKind",
    "Preprocess",
    "Resample",
    "ResizeMode",
    "ResourceLimitError",
    "UnsupportedError",
    "__version__",
    "ac_next_state",
    "check_pool",
    "classify",
    "classify_prepared",
    "cpu_kernels",
    "default_pool",
    "default_threads",
    "device_memory",
    "embed",
    "encode_prepared",
    "engine_file",
    "ggml_version",
    "has_cuda",
    "parse_device",
    "plan",
    "pool",
    "pool_modes",
    "rollout",
]
