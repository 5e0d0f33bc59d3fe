"""The same bits on every CPU kernel path: every model kind (images in f32 / f16 / widened bf16, a
V-JEPA 2 clip with its classifier, text, V-JEPA 2-AC and LeWM rollouts) run once per path this CPU
has (JEPA_GEMM: avx512, avx2, portable, and the bf16 kernels where present), each in its own
process, and compared as float32 bit patterns. This is the promise that an index built on an
AVX-512 server and queried from an AVX2 laptop (or an ARM box: NEON and portable) gets the same
vectors. bf16 weights on a bf16 kernel (AMX / AVX512-BF16) are the half class, their own bits: they
are compared only among the paths that widen them to f32. q8_0 and i8c weights run the engine's int8
products on every path (AMX, VNNI, AVX2, portable): each its own class, the same bits everywhere, so
compared on all."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import kernel_path_outputs
from conftest import bits, import_tool

pytestmark = [pytest.mark.torch, pytest.mark.slow]
KERNEL_PATHS = import_tool("kernel_paths")


@pytest.fixture(scope="module")
def outputs(
    kernel_path_models: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, np.ndarray]]:
    tmp_path = tmp_path_factory.mktemp("path-outputs")
    out: dict[str, dict[str, np.ndarray]] = {}
    for cap, line in KERNEL_PATHS.distinct().items():
        out[line] = kernel_path_outputs.run(sys.executable, kernel_path_models, tmp_path / f"{cap}.npz", cap)
        assert str(out[line]["kernels"]) == line
    return out


def test_this_cpu_has_more_than_one_path(outputs: dict[str, dict[str, np.ndarray]]) -> None:
    # Every x86-64 CPU with AVX2 runs avx2 and portable at least; ARM64 neon and portable.
    lines = list(outputs)
    assert any(line.startswith("f32/f16: portable") for line in lines)
    if any("avx" in line or "neon" in line for line in lines):
        assert len(lines) >= 2, lines


def test_exact_class_is_the_same_bits_on_every_path(outputs: dict[str, dict[str, np.ndarray]]) -> None:
    lines = list(outputs)
    first = outputs[lines[0]]
    for line in lines[1:]:
        for key, want in first.items():
            if key == "kernels" or key.startswith("vit_bf16."):
                continue
            np.testing.assert_array_equal(
                bits(outputs[line][key]), bits(want), err_msg=f"{key}: {line} vs {lines[0]}"
            )


def test_widened_bf16_is_the_same_bits_on_every_path_that_widens(
    outputs: dict[str, dict[str, np.ndarray]],
) -> None:
    widening = [line for line in outputs if kernel_path_outputs.widens_bf16(line)]
    assert widening, list(outputs)
    for line in widening[1:]:
        for key in ("vit_bf16.tokens", "vit_bf16.alone"):
            np.testing.assert_array_equal(
                bits(outputs[line][key]), bits(outputs[widening[0]][key]), err_msg=line
            )


def test_each_path_keeps_batch_identity(outputs: dict[str, dict[str, np.ndarray]]) -> None:
    for line, o in outputs.items():
        for name in ("vit", "vit_f16", "vit_bf16", "vit_q8_0", "vit_i8c"):
            np.testing.assert_array_equal(
                bits(o[f"{name}.alone"][0]), bits(o[f"{name}.tokens"][1]), err_msg=line
            )
        np.testing.assert_array_equal(bits(o["text.alone"]), bits(o["text.batch"]), err_msg=line)
