"""tools/bench/text.py --smoke: every variant (sentence-transformers, ONNX Runtime, jepa f32 / f16) runs
end to end on a tiny random BERT, the record is complete, and the JSON renders (docs/text.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import import_tool, smoke_record

pytestmark = [pytest.mark.torch, pytest.mark.transformers]

VARIANTS = {"st-torch", "ort-f32", "ort-f32-sorted", "jepa-f32", "jepa-f16"}


def test_bench_text_smoke(tmp_path: Path) -> None:
    data = smoke_record("bench/text.py", tmp_path / "t.json", "--threads", "1")
    assert data["schema"] == 1 and data["smoke"]
    assert set(data["tokens_per_s"]) == set(data["padding_waste"]) == VARIANTS
    assert all(v > 0 for v in data["tokens_per_s"].values())
    assert data["padding_waste"]["jepa-f32"] == data["padding_waste"]["jepa-f16"] == 0.0
    assert data["padding_waste"]["ort-f32"] > 0  # texts of different lengths: the peers pad
    assert data["padding_waste"]["ort-f32-sorted"] <= data["padding_waste"]["ort-f32"]
    assert all(v > 0 for v in data["ratios"].values())
    assert data["parity_vs_st"]["jepa-f32"]["min_cos"] >= 0.99999
    assert data["parity_vs_st"]["jepa-f16"]["min_cos"] >= 0.9999
    assert data["parity_vs_st"]["ort-f32"]["min_cos"] >= 0.99999
    assert data["parity_vs_st"]["ort-f32-sorted"]["min_cos"] >= 0.99999
    assert data["token_ids_identical"] and data["bit_identical_alone_vs_batch"]
    assert data["machine"]["simd"] and data["commit"] and data["benchmark"] == "bench-text"
    assert data["held"]["jepa"] == data["machine"]["kernels"]
    text = import_tool("render_docs").render_bench_text(data)
    for label in ("ONNX Runtime f32", "length-sorted batches", "sentence-transformers (PyTorch)", "jepa f16",
                  "padding computed"):
        assert label in text, label
