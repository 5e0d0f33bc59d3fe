"""tools/bench/engine.py --smoke: every variant (PyTorch, ONNX Runtime, OpenVINO f32 / bf16, jepa f32 /
bf16 / f16 / q8_0 / q4_k / i8c) runs end to end on a tiny ViT and a tiny V-JEPA 2 video encoder, and the
JSON renders.

The peers are in requirements/bench.txt, which the test command installs: a missing one fails here
rather than skipping, so the benchmark cannot quietly lose a column. Under JEPA_CPU_FEATURES (make
cpu-test) the run stands for the smaller CPU: its record says what each engine was held to."""

from __future__ import annotations

from pathlib import Path

import pytest

from jepa.cpu import cpu_info

from conftest import import_tool, smoke_record

VARIANTS = {"torch-f32", "ort-f32", "ov-f32", "jepa-f32", "ov-bf16", "jepa-bf16", "jepa-f16", "jepa-q8_0",
            "jepa-q4_k", "jepa-i8c", "ort-int8", "ov-int8w", "ov-int8"}
JEPA = ("jepa-f32", "jepa-bf16", "jepa-f16", "jepa-q8_0", "jepa-q4_k", "jepa-i8c")


@pytest.mark.cpu_class
def test_bench_engine_smoke(tmp_path: Path) -> None:
    data = smoke_record("bench/engine.py", tmp_path / "e.json", "--threads", "1")
    assert data["schema"] == 2 and data["smoke"] and data["benchmark"] == "bench-engine"
    # The record's CPU is the engine's view of it (a mask included), and says what each engine was held to.
    here = cpu_info()
    assert data["machine"]["cpu_mask"] == here.mask and set(data["machine"]["features"]) == here.features
    assert data["held"]["jepa"] == here.kernels == data["machine"]["kernels"]
    assert ("onnxruntime" in data["held"]) == (here.features != here.detected)
    assert {(c["model"], c["batch"]) for c in data["cells"]} == {
        ("vit-tiny", 1), ("vit-tiny", 2), ("vjepa2-tiny", 1), ("vjepa2-tiny", 2)}
    for name, info in data["models"].items():
        assert info["export"]["exporter"] is not None, (name, info["export"])
        assert set(info["ov_kernels"]) == {"ov-f32", "ov-bf16", "ov-int8w", "ov-int8"}
    peaks = data["peaks"]
    assert peaks["f32_gflops"] > 0
    # The bf16 peak is measured where the CPU computes in bf16 (AVX512-BF16 / AMX), and only there:
    # elsewhere torch's bf16 product is emulated and the peak is recorded as skipped.
    if cpu_info().bf16:
        assert peaks["bf16_gflops"] > 0
    else:
        assert peaks["bf16_gflops"] is None and "skipped" in peaks["runs"][0]["onednn-bf16"]
    for c in data["cells"]:
        where = (c["model"], c["batch"])
        assert set(c["ms_per_img"]) == VARIANTS, where
        assert all(v > 0 for v in c["ms_per_img"].values()), where
        assert set(c["gflops"]) == set(c["peak_share"]) == VARIANTS, where
        assert all(v is not None for v in c["ratios"].values()), where
        assert set(c["max_rel_diff_vs_torch"]) == set(c["pooled_cos_vs_torch"]) == VARIANTS - {"torch-f32"}
        for k in ("ort-f32", "ov-f32", "jepa-f32"):  # the exact class
            assert c["max_rel_diff_vs_torch"][k] < 1e-4, (where, k)
        for k in ("ov-bf16", "jepa-bf16", "jepa-f16"):  # the half class
            assert c["pooled_cos_vs_torch"][k] >= 0.9999, (where, k)
        for k in ("jepa-q8_0", "jepa-i8c"):  # the q8_0 tier (docs/quantize.md), i8c's too
            assert c["pooled_cos_vs_torch"][k] >= 0.999, (where, k)
        for k in ("ort-int8", "ov-int8w", "ov-int8"):  # the int8 peers: measured, and close to f32
            assert c["pooled_cos_vs_torch"][k] >= 0.99, (where, k)
        assert c["goals"]["q8_0_vs_jepa_f32"] == 1.5 and c["goals"]["q8_0_vs_int8_peer"] == 1.0, where
        assert c["goals"]["i8c_vs_jepa_f32"] == 1.5 and c["goals"]["i8c_vs_int8_peer"] == 1.0, where
        for k in ("jepa-q8_0", "jepa-i8c"):  # no GEMM peak for the quantized class
            assert c["peak_share"][k] is None, (where, k)
        assert all(c["threads_1_2_bit_identical"][k] for k in JEPA), where
        if c["batch"] > 1:
            assert all(c["batch_bit_identical"][k] for k in JEPA), where
    text = import_tool("render_docs").render_bench_engine(data)
    assert ("**Held to" in text) == bool(here.mask)
    for label in ("ORT f32", "OpenVINO bf16", "jepa bf16", "jepa q8_0", "jepa q4_k", "jepa i8c",
                  "V-JEPA 2 tiny (smoke)",
                  "GEMM peaks"):
        assert label in text, label


def test_renders_the_first_shape_too() -> None:
    # bench-engine.json from before the peers (no "schema" key) still renders, as the old tables.
    old = {
        "started": "2026-11-29T00:00:00", "seconds": 60.0, "image_size": 224,
        "machine": {"cpu": "x", "cores": 2, "threads": 2, "simd": ["avx2"]},
        "versions": {"jepa": "0", "ggml": "0", "torch": "0", "transformers": "0"},
        "cells": [{
            "model": "vit-s16", "batch": 8, "others_cpu_share": 0.0,
            "ms_per_img": dict.fromkeys(
                ("torch", "jepa-f32", "jepa-f32-flash", "jepa-f16", "jepa-f16-flash"), 1.0),
            "batch_bit_identical": {"jepa-f32": True},
            "max_rel_diff_vs_torch": {"jepa-f32": 1e-6},
        }],
        "summary": [{"model": "vit-s16", "batch": 8, "best_bit_identical": "jepa-f32", "ratio": 1.0,
                     "goal": 1.2, "meets_goal": False, "flash_speedup_f32": 1.0, "flash_speedup_f16": 1.0}],
    }
    assert "fastest bit-identical jepa" in import_tool("render_docs").render_bench_engine(old)
