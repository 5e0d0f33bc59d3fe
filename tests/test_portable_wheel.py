"""The Docker images' build steps, without Docker: the portable wheel (JEPA_NATIVE=OFF, no tests) builds,
installs with the server extra into a fresh virtual environment, and serves the demo model there.
This is what docker/Dockerfile.cpu runs (docker/README.md); CI runs it in the image's place.

The same wheel then runs on an AVX2-only CPU (Haswell, emulated by qemu-user: no AVX-512 anywhere,
ggml compiled for x86-64-v3 as an AVX2 machine's own build would be) and must give every model kind
the bits this machine's default path gives: the promise that the exact class does not depend on the
CPU, checked against a CPU this machine is not. `make test` installs qemu-user (make qemu-deps)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import kernel_path_outputs
from conftest import ROOT, bits

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def portable_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("portable")
    wheels = tmp / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            "-C",
            f"build-dir={tmp / 'build'}",
            "-C",
            "cmake.define.JEPA_NATIVE=OFF",
            "-C",
            "cmake.define.JEPA_BUILD_TESTS=OFF",
            str(ROOT),
        ],
        check=True,
        timeout=1800,
    )
    (wheel,) = wheels.glob("jepa-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", f"{wheel}[server]"], check=True, timeout=1800
    )
    return venv


def test_portable_wheel_serves_the_demo(portable_venv: Path, tmp_path: Path) -> None:
    py = portable_venv / "bin" / "python"
    # The installed package is the wheel's, not this checkout's editable one.
    where = subprocess.run(
        [str(py), "-c", "import jepa; print(jepa.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert str(portable_venv) in where, where
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JEPA_")}
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(portable_venv / "bin" / "jepa-server"), "--demo", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 180
        status = 0
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, _ = _get(f"http://127.0.0.1:{port}/health")
            except OSError:
                status = 0
            if status == 200:
                break
            time.sleep(0.5)
        assert status == 200, log.read_text()
        status, body = _get(f"http://127.0.0.1:{port}/v1/models")
        assert status == 200 and json.loads(body)["data"], body
    finally:
        proc.terminate()
        proc.wait(timeout=60)


# Haswell: AVX2, FMA, F16C, no AVX-512 (v4: without TSX, which TCG lacks).
AVX2_CPU = ("qemu-x86_64", "-cpu", "Haswell-v4")


@pytest.mark.torch  # the V-JEPA 2-AC checkpoint converts through torch
def test_an_avx2_only_cpu_gets_this_machines_bits(
    portable_venv: Path, emulated_path_models: Path, tmp_path: Path
) -> None:
    if shutil.which(AVX2_CPU[0]) is None:
        pytest.fail("qemu-x86_64 not found: `make qemu-deps` installs qemu-user (Debian)")
    here = kernel_path_outputs.run(sys.executable, emulated_path_models, tmp_path / "here.npz")
    there = kernel_path_outputs.run(
        str(portable_venv / "bin" / "python"),
        emulated_path_models,
        tmp_path / "avx2.npz",
        launcher=AVX2_CPU,
        timeout=1500,
    )
    assert str(there["kernels"]) == "f32/f16: avx2-fma; bf16: avx2-fma; q8_0: avx2", there["kernels"]
    widened = kernel_path_outputs.widens_bf16(str(here["kernels"]))
    for key, want in here.items():
        if key == "kernels" or (key.startswith("vit_bf16.") and not widened):
            continue  # bf16 on a bf16 kernel here is the half class, its own bits
        np.testing.assert_array_equal(
            bits(there[key]), bits(want), err_msg=f"{key}: AVX2 CPU vs {here['kernels']}"
        )
