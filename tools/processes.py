"""Stopping a child jepa-server: one way, shared by the serving benchmarks (tools/bench/serving.py) and
the tests' ServerProcess (conftest.import_tool("processes"))."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def stop(proc: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """SIGTERM (unless it has exited), then SIGKILL if it is still running after `timeout` s. Its
    stdout pipe, which nobody reads after the startup line, is drained on the way (communicate), so a
    server writing there cannot block its own exit."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
