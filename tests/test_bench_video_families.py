"""tools/bench/video_families.py's cell and its docs renderer, at tiny sizes, without the upstream trees.

The benchmark times jepa beside V-JEPA 2.1's and LeVJEPA's upstream code, imported from checkouts the
user passes (facebookresearch/vjepa2, MLO-lab/LeVJEPA): they are not in this repository or in CI, so this
test cannot build the real upstream modules. Instead `family_cell` gets a stand-in peer: a tiny torch
module with the upstream parameter names and shapes (so the release-layout checkpoint writer and
jepa-convert run for real) and the same call, module(x [B, C, T, H, W]) -> tokens [B, N, D], but a
trivial forward (patch embedding, modality vector or CLS, the output norm; no blocks), so the parity
figures here mean nothing. The ONNX Runtime / OpenVINO path (export, load, run) is exercised on it
once; the real upstream modules run only in the full benchmark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import import_tool

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
nn = torch.nn
bench = import_tool("bench.video_families")
render_docs = import_tool("render_docs")


class _Block(nn.Module):
    """The upstream block's parameter layout (fused qkv, proj, a GELU MLP, two norms); never called."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
        self.attn = nn.Module()
        self.attn.qkv, self.attn.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Module()
        self.mlp.fc1, self.mlp.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)


def _embed(d: int, tubelet: int) -> nn.Module:
    m = nn.Module()
    m.proj = nn.Conv3d(3, d, (tubelet, 16, 16), (tubelet, 16, 16))
    return m


class StandInVJEPA2_1(nn.Module):
    """V-JEPA 2.1's encoder parameters (two patch embeddings, modality vectors, four level norms)."""

    def __init__(self, spec: Any) -> None:
        super().__init__()
        d = spec.width
        self.patch_embed, self.patch_embed_img = _embed(d, 2), _embed(d, 1)
        self.blocks = nn.ModuleList(_Block(d) for _ in range(spec.depth))
        self.norms_block = nn.ModuleList(nn.LayerNorm(d, eps=1e-6) for _ in range(4))
        self.img_mod_embed = nn.Parameter(torch.zeros(1, 1, d))
        self.video_mod_embed = nn.Parameter(torch.zeros(1, 1, d))

    def forward(self, x: Any) -> Any:
        tokens = self.patch_embed.proj(x).flatten(2).transpose(1, 2) + self.video_mod_embed
        return self.norms_block[-1](tokens)


class StandInLeVJEPA(nn.Module):
    """LeVJEPA's encoder parameters (a CLS, the tubelet-1 patch embedding, the final norm)."""

    def __init__(self, spec: Any) -> None:
        super().__init__()
        d = spec.width
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.patch_embed = _embed(d, 1)
        self.blocks = nn.ModuleList(_Block(d) for _ in range(spec.depth))
        self.norm = nn.LayerNorm(d, eps=1e-6)

    def forward(self, x: Any) -> Any:
        tokens = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        return self.norm(torch.cat([self.cls_token.expand(x.shape[0], -1, -1), tokens], 1))


STAND_INS = {"vjepa2_1": StandInVJEPA2_1, "levjepa": StandInLeVJEPA}
TINY = {
    "vjepa2_1": bench.Spec("vjepa2_1", "tiny 2.1", 32, 12, 2, 32, 2),  # levels need 12 blocks
    "levjepa": bench.Spec("levjepa", "tiny LeVJEPA", 32, 1, 2, 32, 2),
}


def _cell(family: str, onnx: bool, tmp_path: Path) -> dict[str, Any]:
    spec = TINY[family]

    def build() -> tuple[Any, dict[str, np.ndarray]]:
        module = STAND_INS[family](spec).eval()
        return module, bench.randomize(module, seed=1)

    cell = bench.family_cell(spec, build, threads=1, rounds=1, onnx=onnx, ftypes=("f32",), workdir=tmp_path)
    return dict(cell)


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("bench-video-families")
    return [_cell("vjepa2_1", False, tmp), _cell("levjepa", True, tmp)]


def test_a_cell_times_every_variant(cells: list[dict[str, Any]]) -> None:
    v21, lev = cells
    assert set(v21["seconds_per_clip"]) == {"torch-f32", "jepa-f32"}
    assert v21["tokens_shape"] == [1, 4, 32] and v21["spec"]["n_tokens"] == 4  # 1 x 2 x 2, no CLS
    assert lev["tokens_shape"] == [1, 9, 32] and lev["spec"]["n_tokens"] == 9  # CLS + 2 x 2 x 2
    for c in cells:
        assert all(len(t) == 1 for t in c["all_times"].values())
        assert c["ratios"]["torch-f32 / jepa-f32"] > 0 and "jepa-f32" in c["parity_vs_torch"]


def test_the_onnx_peers_run_when_the_module_exports(cells: list[dict[str, Any]]) -> None:
    lev = cells[1]
    assert lev["onnx_export"]["exporter"] is not None, lev["onnx_export"]
    assert {"ort-f32", "ov-f32"} <= set(lev["seconds_per_clip"])
    assert "faster of ORT/OV / jepa-f32" in lev["ratios"] and "jepa" in lev["goal"]
    # The stand-in's forward is plain torch: its export runs in both runtimes to float rounding.
    for peer in ("ort-f32", "ov-f32"):
        assert lev["parity_vs_torch"][peer]["min_cos"] > 0.99999


def test_the_renderer_reads_the_record(cells: list[dict[str, Any]]) -> None:
    record = {"benchmark": "bench-video-families", "measured_at": "now", "commit": "abc", "smoke": True,
              "machine": {"cpu": "test CPU", "cores": 2}, "cells": cells}
    text = render_docs.RENDERERS["bench-video-families"](json.loads(json.dumps(record)))
    assert "tiny 2.1" in text and "tiny LeVJEPA" in text and "test CPU" in text
    assert "no ONNX peer" in text  # the 2.1 cell ran without them
