"""Numpy reference forward passes of the world models (float64), written from the upstream code
and checked against the reference bundles' goldens: they pin down every architecture detail the
engine must reproduce, and stand in for it where a `predict` callable is wanted.

`from_gguf(path)` builds one from a converted file's keys and tensors alone."""

from __future__ import annotations

from .cem import assert_cem_replays, cem_golden, cem_options
from .compare import agreement, assert_agrees, assert_rel_close
from .lewm import LeWM
from .loaders import ac_from_gguf, from_gguf, lewm_from_gguf, read_gguf
from .vjepa2_ac import ACPredictor, ACWorldModel

__all__ = [
    "ACPredictor",
    "ACWorldModel",
    "LeWM",
    "ac_from_gguf",
    "agreement",
    "assert_agrees",
    "assert_cem_replays",
    "assert_rel_close",
    "cem_golden",
    "cem_options",
    "from_gguf",
    "lewm_from_gguf",
    "read_gguf",
]
