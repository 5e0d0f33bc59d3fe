""".ci/steps.sh, `make test`'s runner: each step timed, the table printed and kept in
build/test-times.txt, a failing step stops the run with its status; and a dry run (`make -n test`,
which the docs' tests do) leaves a real run's table alone."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from conftest import ROOT


def _checkout(tmp_path: Path) -> Path:
    """A folder holding only .ci/steps.sh and a fake make that fails the step named `bad`."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "steps.sh", tmp_path / ".ci" / "steps.sh")
    fake = tmp_path / "fake-make"
    fake.write_text('#!/usr/bin/env bash\nstep="${@: -1}"\necho "ran $step" >> ran.txt\n'
                    '[ "$step" = bad ] && exit 3\nexit 0\n')
    fake.chmod(0o755)
    return tmp_path


def _run(root: Path, *steps: str, makeflags: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MAKE": str(root / "fake-make"), "MAKEFLAGS": makeflags}
    return subprocess.run(["bash", str(root / ".ci" / "steps.sh"), *steps], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)


def test_each_step_is_timed_and_a_failure_stops_the_run(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    ok = _run(root, "one", "two")
    table = (root / "build" / "test-times.txt").read_text().splitlines()
    assert ok.returncode == 0 and [line.split()[0] for line in table] == ["one", "two", "total"]
    assert all(line.split()[2] == "s" and line.endswith("ok") for line in table[:2])
    assert "where the time went" in ok.stdout and table[0] in ok.stdout
    bad = _run(root, "one", "bad", "never")
    table = (root / "build" / "test-times.txt").read_text().splitlines()
    assert bad.returncode == 3 and [line.split()[0] for line in table] == ["one", "bad", "total"]
    assert table[1].endswith("FAILED (3)")
    assert "ran never" not in (root / "ran.txt").read_text()


def test_a_dry_run_leaves_the_real_table_alone(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    assert _run(root, "one", "two").returncode == 0
    real = (root / "build" / "test-times.txt").read_text()
    dry = _run(root, "dry", makeflags="n --no-print-directory")
    assert dry.returncode == 0 and "ran dry" in (root / "ran.txt").read_text()
    assert (root / "build" / "test-times.txt").read_text() == real
    # long options alone (no single-letter flags): a real run, which rewrites the table
    assert _run(root, "three", makeflags=" --no-print-directory").returncode == 0
    assert (root / "build" / "test-times.txt").read_text().split()[0] == "three"
