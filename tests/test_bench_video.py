"""tools/bench/video.py --smoke: a tiny V-JEPA 2 encoder through transformers' VJEPA2Model and jepa (f32,
f16) on one clip, the record complete, and the JSON renders (docs/video.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import import_tool, smoke_record

pytestmark = [pytest.mark.torch, pytest.mark.transformers]


def test_bench_video_smoke(tmp_path: Path) -> None:
    data = smoke_record("bench/video.py", tmp_path / "v.json", "--threads", "1")
    assert data["smoke"] and data["benchmark"] == "bench-video" and data["commit"]
    assert set(data["seconds_per_clip"]) == {"torch", "jepa-f32", "jepa-f16"}
    assert all(len(t) == 1 for t in data["all_times"].values())
    assert set(data["parity_vs_torch"]) == set(data["ratio_torch_over_jepa"]) == {"jepa-f32", "jepa-f16"}
    assert data["parity_vs_torch"]["jepa-f32"]["min_cos"] > 0.99999
    assert data["parity_vs_torch"]["jepa-f16"]["min_cos"] > 0.999
    assert data["held"]["jepa"] == data["machine"]["kernels"]
    text = import_tool("render_docs").RENDERERS["bench-video"](data)
    assert "jepa f16 weights" in text and data["model"] in text
