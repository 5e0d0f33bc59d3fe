"""The one switch that makes this CPU stand for a smaller one (JEPA_CPU_FEATURES, csrc/src/cpu/), as
Python sees it: what the engine runs follows the masked features; a mask never adds a feature and a
typo never passes for a larger CPU; and a CPU-dependent assertion written on a bf16 CPU (the shape
of the one that broke CI on an AVX2-only EPYC) is caught by the masked run that `make cpu-test` makes.

The tests marked cpu_class run again under each CPU class this CPU can stand for (`make cpu-test`)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

import jepa
from jepa.cpu import ALL_FEATURES, cpu_classes, cpu_info, distinct_paths, kernel_paths

from conftest import ROOT


def expected_kernels(features: frozenset[str]) -> str:
    """The kernel line a feature set runs by default, derived here by hand from the features (x86 and
    ARM64), so the engine's selection is checked against a second statement of it."""
    if "asimd" in features:
        return "f32/f16: neon; bf16: neon; q8_0: " + ("neon-dotprod" if "asimddp" in features else "portable")
    if "avx2" not in features:  # x86 without AVX2 + FMA: ggml's products; elsewhere the portable kernels
        x86 = platform.machine().lower() in ("x86_64", "amd64")
        return "ggml" if x86 else "f32/f16: portable; bf16: portable; q8_0: portable"
    f32 = "avx512-fma" if "avx512" in features else "avx2-fma"
    bf16 = f32
    if "avx512_bf16" in features:
        bf16 = "amx" if "amx_bf16" in features else "avx512-bf16"
    if "avx512_vnni" in features:
        q8 = "amx-int8" if "amx_int8" in features else "avx512-vnni"
    else:
        q8 = "avx-vnni" if "avx_vnni" in features else "avx2"
    return f"f32/f16: {f32}; bf16: {bf16}; q8_0: {q8}"


def engine_view(env: dict[str, str]) -> list[str]:
    """(features, kernels, mask error) of a fresh process with env added."""
    code = ("from jepa.cpu import cpu_info; i = cpu_info(); "
            "print(' '.join(sorted(i.features))); print(i.kernels); print(i.mask_error)")
    cmd = [sys.executable, "-c", code]
    r = subprocess.run(cmd, env=os.environ | env, capture_output=True, text=True, check=True, timeout=120)
    return [*r.stdout.splitlines(), r.stderr]


@pytest.mark.cpu_class
def test_the_engine_runs_what_the_masked_features_say() -> None:
    info = cpu_info()
    assert not info.mask_error, info.mask_error
    assert info.features <= info.detected
    rows = kernel_paths()
    assert rows[0].name == "native" and rows[0].kernels == expected_kernels(info.features), info
    # JEPA_GEMM picks the row that runs (unset: the default), and each row's line is its kinds.
    (selected,) = [r for r in rows if r.selected]
    assert info.kernels == jepa.cpu_kernels() == selected.kernels
    assert selected.name == (os.environ.get("JEPA_GEMM") or "native") or selected is rows[0]
    for r in rows:
        assert r.kernels == "ggml" or r.kernels == f"f32/f16: {r.f32}; bf16: {r.bf16}; q8_0: {r.q8}", r
    # Every other path differs from the default in some kind; portable is always among them unless it runs.
    others = distinct_paths()
    assert "portable" in others or info.kernels.startswith("f32/f16: portable")
    assert len(set(others)) == len(others) and "ggml" not in others


@pytest.mark.cpu_class
def test_each_row_is_what_a_process_under_it_runs() -> None:
    # The table's line for a row (what tools/kernel_paths.py and the benchmarks read instead of asking
    # a child) is what a fresh process with JEPA_GEMM set to it reports.
    code = "import jepa; print(jepa.cpu_kernels())"
    for r in kernel_paths():
        env = {**os.environ, "JEPA_GEMM": r.name}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == r.kernels, (r, out.stderr)


@pytest.mark.cpu_class
def test_the_half_and_int8_beliefs_follow_the_mask() -> None:
    info = cpu_info()
    assert info.bf16 == bool(info.features & {"avx512_bf16", "amx_bf16"})
    assert info.vnni == bool(info.features & {"avx512_vnni", "avx_vnni", "amx_int8", "asimddp"})
    assert ("bf16: amx" in info.kernels or "bf16: avx512-bf16" in info.kernels) == info.bf16


def test_every_class_runs_within_what_this_cpu_has() -> None:
    have = cpu_info().detected
    for c in cpu_classes():
        features, kernels, error = engine_view({"JEPA_CPU_FEATURES": c.name, "JEPA_GEMM": ""})[:3]
        got = frozenset(features.split())
        assert not error and got == c.features & have, (c.name, got)
        assert kernels == expected_kernels(got), (c.name, kernels)


def test_a_mask_never_adds_and_native_is_everything() -> None:
    have = cpu_info().detected
    assert frozenset(engine_view({"JEPA_CPU_FEATURES": "native"})[0].split()) == have
    everything = ",".join(sorted(ALL_FEATURES))
    assert frozenset(engine_view({"JEPA_CPU_FEATURES": everything})[0].split()) == have
    # A removal takes what builds on it along: no AVX-512 means no VNNI, bf16 or AMX either.
    got = frozenset(engine_view({"JEPA_CPU_FEATURES": "-avx512"})[0].split())
    assert got == have - {"avx512", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8"}


def test_an_unknown_name_runs_as_the_smallest_cpu_and_says_so() -> None:
    features, kernels, error, stderr = engine_view({"JEPA_CPU_FEATURES": "zen5"})
    assert features == "" and "zen5" in error and "unknown CPU feature or class" in error
    assert kernels == expected_kernels(frozenset())
    assert "JEPA_CPU_FEATURES=zen5 refused" in stderr


PLANTED = '''
from jepa.cpu import cpu_info

def test_written_on_a_bf16_cpu():
    # The shape of the assertion that failed CI on an AVX2-only EPYC: a peak this CPU measures is
    # taken to exist everywhere.
    peaks = {"bf16_gflops": 123.0 if cpu_info().bf16 else None}
    assert peaks["bf16_gflops"] > 0
'''


def test_the_masked_run_catches_a_planted_cpu_assumption(tmp_path: Path) -> None:
    (tmp_path / "test_planted.py").write_text(PLANTED)

    def run(mask: str) -> int:
        env = {**os.environ, "JEPA_CPU_FEATURES": mask}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
               "-c", os.devnull, str(tmp_path / "test_planted.py")]
        r = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        return r.returncode

    # As this process runs (unmasked in py-test) it passes exactly where the CPU has bf16, so on the
    # CPU it was written on; the masked run for the AVX2-only class fails it on every CPU, which is
    # what make cpu-test is for.
    assert run(os.environ.get("JEPA_CPU_FEATURES", "")) == (0 if cpu_info().bf16 else 1)
    assert run("x86-64-v3" if "avx2" in cpu_info().detected else "generic") == 1


def test_make_cpu_test_lists_the_classes_this_cpu_stands_for() -> None:
    cmd = [sys.executable, str(ROOT / "tools" / "kernel_paths.py"), "--classes"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120)
    names = r.stdout.split()
    have = cpu_info().detected
    assert all(c.features <= have and c.features != have for c in cpu_classes() if c.name in names)
    # Every x86 CPU with AVX2 stands for the one without it at least (an ARM64 core: plain ARMv8-A).
    assert names or not have & {"avx2", "asimddp"}
    sets = [frozenset(c.features) for c in cpu_classes() if c.name in names]
    assert len(set(sets)) == len(sets)  # one class per feature set
