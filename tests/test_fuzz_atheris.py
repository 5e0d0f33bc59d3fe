"""The atheris fuzz targets (tests/fuzz/, docs/fuzzing.md) in CI: each runs, bounded, over its seed
corpus with its dictionary, and a finding (an exception outside the target's allowed classes, or a
hang) fails the test with the reproducer libFuzzer wrote. JEPA_FUZZ_SECONDS sets the time per target
(default 30; at most 60 in CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parent / "fuzz"
SECONDS = int(os.environ.get("JEPA_FUZZ_SECONDS", "30"))

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("target", ["media", "request", "text", "tokenizer", "catalog"])
def test_fuzz_target_finds_nothing(target: str, tmp_path: Path) -> None:
    work = tmp_path / "corpus"
    work.mkdir()
    cmd = [
        sys.executable, str(FUZZ / f"fuzz_{target}.py"),
        f"-max_total_time={SECONDS}", "-timeout=20", "-rss_limit_mb=3072", "-print_final_stats=1",
        f"-dict={FUZZ / f'{target}.dict'}", f"-artifact_prefix={tmp_path}/",
        str(work), str(FUZZ / "corpus" / target),
    ]
    env = {k: v for k, v in os.environ.items() if k != "JEPA_FUZZ_FINDINGS"}  # findings must fail here
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=SECONDS + 240, cwd=FUZZ, env=env)
    tail = "\n".join(r.stderr.splitlines()[-40:])
    crashes = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-")))
    assert r.returncode == 0 and not crashes, f"fuzz_{target} found {crashes}:\n{tail}"
    runs = [line for line in r.stderr.splitlines() if line.startswith("stat::number_of_executed_units")]
    assert runs and int(runs[0].split()[-1]) > 0, tail
