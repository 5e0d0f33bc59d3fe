"""The deployment files, checked without a Docker engine: the Dockerfiles and compose file parse and
say what docker/README.md promises, every build option they pass exists in CMake, the entrypoint is
an installed console script, and the systemd unit passes `systemd-analyze verify`."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

DOCKER = ROOT / "docker"
INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
    "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per logical line: comments dropped, continuations joined."""
    text = re.sub(
        r"\\\n", " ", "\n".join(ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#"))
    )
    out = []
    for line in text.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            assert word in INSTRUCTIONS, f"{path.name}: unknown instruction {word!r}"
            out.append((word, rest.strip()))
    return out


def _final_stage(ins: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last = max(i for i, (w, _) in enumerate(ins) if w == "FROM")
    return ins[last:]


def _cmake_names() -> set[str]:
    text = (ROOT / "CMakeLists.txt").read_text()
    return set(re.findall(r"option\((\w+)", text)) | {"CMAKE_CUDA_ARCHITECTURES", "CMAKE_BUILD_TYPE"}


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_dockerfile(name: str) -> None:
    ins = _instructions(DOCKER / name)
    stages = [a for w, a in ins if w == "FROM"]
    assert len(stages) >= 2 and " AS build" in stages[0], "a multi-stage build"
    final = _final_stage(ins)
    words = {w for w, _ in final}
    assert {"USER", "HEALTHCHECK", "ENTRYPOINT", "VOLUME", "EXPOSE"} <= words
    user = next(a for w, a in final if w == "USER")
    assert user not in ("root", "0"), "runs as a non-root user"
    assert "/health" in next(a for w, a in final if w == "HEALTHCHECK")
    assert "/models" in next(a for w, a in final if w == "VOLUME")
    # The models are mounted, never baked in.
    assert not any(w in ("COPY", "ADD") and ".gguf" in a for w, a in ins)
    # The image runs jepa-server and nothing else: the entrypoint is the installed console script.
    entry = next(a for w, a in final if w == "ENTRYPOINT")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entry == '["jepa-server"]' and "jepa-server" in scripts
    # Every CMake option the build passes exists; the image is the portable build.
    defines = re.findall(r"cmake\.define\.(\w+)=(\S+)", " ".join(a for _, a in ins))
    assert defines and {k for k, _ in defines} <= _cmake_names(), defines
    assert ("JEPA_NATIVE", "OFF") in defines


def test_compose_binds_loopback_and_mounts_models_read_only() -> None:
    svc = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]["jepa"]
    assert all(str(p).startswith("127.0.0.1:") for p in svc["ports"])
    assert any(str(v).endswith(":/models:ro") for v in svc["volumes"])
    assert (ROOT / svc["build"]["dockerfile"]).is_file() or (
        DOCKER / Path(svc["build"]["dockerfile"]).name
    ).is_file()


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    """systemd-analyze verify on the unit, with its ExecStart pointed at this checkout's jepa-server
    (verify checks that the binaries exist)."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze (Debian's systemd package) is needed to verify the unit"
    exe = shutil.which("jepa-server") or str(ROOT / ".venv" / "bin" / "jepa-server")
    assert Path(exe).is_file(), exe
    unit = (ROOT / "systemd" / "jepa-server.service").read_text()
    assert "ExecStartPre=/opt/jepa/bin/jepa-server check" in unit and "NoNewPrivileges=yes" in unit
    assert "ProtectSystem=strict" in unit and "User=jepa" in unit
    local = tmp_path / "jepa-server.service"
    local.write_text(unit.replace("/opt/jepa/bin/jepa-server", exe))
    r = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True, timeout=60)
    problems = [ln for ln in (r.stdout + r.stderr).splitlines() if "jepa-server.service" in ln]
    assert r.returncode == 0 and not problems, r.stdout + r.stderr
