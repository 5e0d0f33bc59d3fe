"""One "auto threads" rule (jepa_default_threads): the CPUs of the affinity mask, capped by the
cgroup's CPU quota, read by the engine's default, the server's settings and `jepa-server info` (the
Ray replicas: tests/test_ray_units.py). JEPA_CGROUP_ROOT points the rule at a fake cgroup mount (tests
only)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import jepa
from jepa_server.info_cmd import devices
from jepa_server.settings import Settings

AFFINITY = len(os.sched_getaffinity(0))


@pytest.fixture
def cpu_max(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fake cgroup v2 mount with no quota; a test writes the quota it wants into the file."""
    f = tmp_path / "cpu.max"
    f.write_text("max 100000\n")
    monkeypatch.setenv("JEPA_CGROUP_ROOT", str(tmp_path))
    yield f


def test_without_a_quota_the_affinity_mask_counts(cpu_max: Path) -> None:
    assert jepa.default_threads() == AFFINITY


def test_a_cgroup_quota_caps_the_count_rounded_up(cpu_max: Path) -> None:
    cpu_max.write_text("100000 100000\n")
    assert jepa.default_threads() == 1
    cpu_max.write_text("20000 100000\n")  # a fifth of a CPU is still one thread
    assert jepa.default_threads() == 1
    cpu_max.write_text("150000 100000\n")  # 1.5 CPUs: two threads, where the mask has two
    assert jepa.default_threads() == min(AFFINITY, 2)
    cpu_max.write_text(f"{(AFFINITY + 3) * 100000} 100000\n")  # a quota above the mask: the mask
    assert jepa.default_threads() == AFFINITY


def test_the_affinity_mask_is_read_live(cpu_max: Path) -> None:
    if AFFINITY < 2:
        pytest.skip("needs two CPUs in the affinity mask")
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(mask)})  # this thread only; restored below
    try:
        assert jepa.default_threads() == 1
    finally:
        os.sched_setaffinity(0, mask)
    assert jepa.default_threads() == AFFINITY


def test_every_reader_follows_the_quota(cpu_max: Path, tiny_vit_path: str) -> None:
    cpu_max.write_text("100000 100000\n")
    assert jepa.Model(tiny_vit_path).context().threads == 1  # the engine's default (n_threads 0)
    assert Settings().graph_threads == 1 and Settings().decode_threads == 1
    assert Settings(workers=2).graph_threads == 1  # never 0
    assert devices(Settings())[0]["cores"] == 1  # jepa-server info's CPU row
