"""The same bits on every CPU kernel path: every model kind (images in f32 / f16 / widened bf16, a
V-JEPA 2 clip with its classifier, text, V-JEPA 2-AC and LeWM rollouts) run once per path this CPU
has (JEPA_GEMM: avx512, avx2, portable, and the bf16 kernels where present), each in its own
process, and compared as float32 bit patterns. This is the promise that an index built on an
AVX-512 server and queried from an AVX2 laptop (or an ARM box: the portable kernels) gets the same
vectors. bf16 weights on a bf16 kernel (AMX / AVX512-BF16) are the half class, their own bits: they
are compared only among the paths that widen them to f32."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, bits, import_tool

pytestmark = [pytest.mark.torch, pytest.mark.slow]
KERNEL_PATHS = import_tool("kernel_paths")


def widens_bf16(line: str) -> bool:
    """'f32/f16: X; bf16: X': bf16 weights widened to the f32 kernel (the exact chains)."""
    f32, bf16 = (part.split(": ")[1] for part in line.split("; "))
    return f32 == bf16


@pytest.fixture(scope="module")
def outputs(
    tmp_path_factory: pytest.TempPathFactory,
    wide_vit_path: str,
    tiny_vjepa2_path: str,
    tiny_ac_path: str,
    tiny_lewm_path: str,
) -> dict[str, dict[str, np.ndarray]]:
    from jepa.convert.quantize import quantize
    from jepa.convert.random_text import write_random_bert

    d = tmp_path_factory.mktemp("paths")
    models = {
        "vit": wide_vit_path,
        "vjepa2": tiny_vjepa2_path,
        "ac": tiny_ac_path,
        "lewm": tiny_lewm_path,
        "text": write_random_bert(d / "text.gguf", max_seq_len=24),
    }
    for t in ("f16", "bf16"):
        quantize(wide_vit_path, d / f"vit_{t}.gguf", t)
        models[f"vit_{t}"] = str(d / f"vit_{t}.gguf")
    spec = d / "models.json"
    spec.write_text(json.dumps(models))
    out: dict[str, dict[str, np.ndarray]] = {}
    for cap, line in KERNEL_PATHS.distinct_paths().items():
        dst = d / f"out-{cap or 'best'}.npz"
        env = {**os.environ, "JEPA_GEMM": cap}
        r = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "kernel_path_outputs.py"), str(dst), str(spec)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr
        with np.load(dst) as z:
            out[line] = {k: z[k] for k in z.files}
        assert str(out[line]["kernels"]) == line
    return out


def test_this_cpu_has_more_than_one_path(outputs: dict[str, dict[str, np.ndarray]]) -> None:
    # Every x86-64 CPU with AVX2 runs avx2 and portable at least; ARM runs portable only.
    lines = list(outputs)
    assert any(line.startswith("f32/f16: portable") for line in lines)
    if any("avx" in line for line in lines):
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
    widening = [line for line in outputs if widens_bf16(line)]
    assert widening, list(outputs)
    for line in widening[1:]:
        for key in ("vit_bf16.tokens", "vit_bf16.alone"):
            np.testing.assert_array_equal(
                bits(outputs[line][key]), bits(outputs[widening[0]][key]), err_msg=line
            )


def test_each_path_keeps_batch_identity(outputs: dict[str, dict[str, np.ndarray]]) -> None:
    for line, o in outputs.items():
        for name in ("vit", "vit_f16", "vit_bf16"):
            np.testing.assert_array_equal(
                bits(o[f"{name}.alone"][0]), bits(o[f"{name}.tokens"][1]), err_msg=line
            )
        np.testing.assert_array_equal(bits(o["text.alone"]), bits(o["text.batch"]), err_msg=line)
