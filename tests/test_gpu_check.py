""".ci/gpu_check.sh and .ci/gpu_check.py here, without a GPU: the dry-run's checks (what a device call
takes along against the tool's 64 MiB, the Python the GPU machine has, the prebuilt core) on forged
folders, the summary, and a --quick rehearsal of the check's steps on the CPU. The tests that need the
hour-long CUDA core build (build/cuda-core/dist) skip where it is absent, saying so."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import ROOT

CI = ROOT / ".ci"


def _ci_module(name: str) -> ModuleType:
    """.ci/<name>.py as a module: a CI script beside the others, not one of the product's tools (it
    reaches tools/ itself, for processes and media_samples, only when it runs a check)."""
    spec = importlib.util.spec_from_file_location(name, CI / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gc = _ci_module("gpu_check")
SCRIPT = CI / "gpu_check.sh"
CUDA_CORE = ROOT / "build" / "cuda-core" / "dist"
CPU_CORE = ROOT / "build" / "cpu-core" / "dist"
MIB = 1 << 20


def _git_tree(root: Path, files: dict[str, bytes]) -> Path:
    """A forged checkout: a git repository with these files tracked, /build/ ignored."""
    root.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    (root / ".gitignore").write_text("/build/\n")
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", "forged"], check=True, env=env)
    return root


def _forged_core(
    root: Path, rel: str = "build/core", *, archs: str = "90-real", cuda: bool = True, digest: bool = True
) -> Path:
    core = root / rel
    (core / "lib").mkdir(parents=True)
    libs = ["lib/libjepa.a", "lib/libggml.a", "lib/libggml-cpu.a", "lib/libggml-base.a"]
    if cuda:
        libs.append("lib/libggml-cuda.a")
    for lib in libs:
        (core / lib).write_bytes(b"not an archive")  # cuobjdump is not asked about a forged library
    (core / "jepa-core.cmake").write_text("# forged\n")
    info: dict[str, Any] = {"cuda": cuda, "cuda_architectures": archs, "libs": libs}
    if digest:
        info["sources_sha256"] = gc.sources_digest(root)
    (core / "jepa-core.json").write_text(json.dumps(info))
    return core


def _dry_run_command(root: Path, carry: str) -> subprocess.CompletedProcess[str]:
    """`gpu_check.py dry-run` on a forged checkout, as a command: its exit status and report."""
    args = [sys.executable, str(CI / "gpu_check.py"), "dry-run", "--root", str(root), "--carry", carry]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


# ---- sizes ---------------------------------------------------------------------------------------


def test_the_size_counts_tracked_untracked_and_carried_files_not_ignored_ones(tmp_path: Path) -> None:
    root = _git_tree(tmp_path / "repo", {"a.txt": b"x" * 1000, "src/b.c": b"y" * 500})
    (root / "untracked.txt").write_bytes(b"z" * 300)  # travels: untracked, not ignored
    (root / "build" / "ignored").mkdir(parents=True)
    (root / "build" / "ignored" / "big.bin").write_bytes(b"0" * 4096)  # ignored and not carried: stays
    (root / "build" / "carried").mkdir()
    (root / "build" / "carried" / "lib.a").write_bytes(b"1" * 2048)
    r = gc.size_report(root, ["build/carried"])
    assert r["bytes"]["build/carried"] == 2048
    assert r["bytes"]["tree"] == 1000 + 500 + 300 + len("/build/\n")
    assert r["total_bytes"] == r["bytes"]["tree"] + 2048 and r["ok"]
    missing = gc.size_report(root, ["build/nothing"])
    assert not missing["ok"] and missing["missing_carry"] == ["build/nothing"]


def test_a_forged_oversized_carry_fails_the_dry_run(tmp_path: Path) -> None:
    root = _git_tree(tmp_path / "repo", {"a.txt": b"x"})
    carry = root / "build" / "carry"
    carry.mkdir(parents=True)
    with (carry / "huge.bin").open("wb") as f:  # sparse: 65 MiB long, next to nothing on disk
        f.truncate(65 * MIB)
    r = gc.size_report(root, ["build/carry"])
    assert not r["ok"] and r["total_mib"] > 64
    done = _dry_run_command(root, "build/carry")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "TOO LARGE" in done.stdout and "dry-run: FAILED" in done.stdout


def test_this_checkout_fits_with_room_for_the_core() -> None:
    """What travels of this tree itself (no carry) leaves most of the 64 MiB to the core and the wheels."""
    r = gc.size_report(ROOT, [])
    assert r["ok"] and r["total_mib"] < 32, r


# ---- the Python the GPU machine has --------------------------------------------------------------


def test_a_forged_cpython_311_extension_fails_the_python_check(tmp_path: Path) -> None:
    root = _git_tree(tmp_path / "repo", {"a.txt": b"x"})
    carry = root / "build" / "carry"
    (carry / "jepa").mkdir(parents=True)
    (carry / "jepa" / "_engine.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF forged")
    (carry / "ok.cpython-312-x86_64-linux-gnu.so").write_bytes(b"\x7fELF forged")
    r = gc.python_report(root, ["build/carry"])
    assert not r["ok"]
    assert len(r["bad"]) == 1 and "_engine.cpython-311" in r["bad"][0] and "3.11" in r["bad"][0]
    done = _dry_run_command(root, "build/carry")
    assert done.returncode == 1 and "CPython 3.11 extension" in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("name", "fits"),
    [
        ("gguf-0.19.0-py3-none-any.whl", True),
        ("av-18.1.0-cp311-abi3-manylinux_2_28_x86_64.whl", True),  # abi3 from 3.11 loads on 3.12
        ("numpy-2.3.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("numpy-2.3.0-cp311-cp311-manylinux_2_17_x86_64.whl", False),
        ("thing-1.0-cp313-abi3-manylinux_2_28_x86_64.whl", False),
        ("thing-1.0-cp312-cp312-manylinux_2_28_aarch64.whl", False),
    ],
)
def test_wheels_are_judged_by_their_tags(name: str, fits: bool) -> None:
    assert gc.wheel_fits(name) is fits


def test_this_checkout_carries_no_extension_for_another_python() -> None:
    r = gc.python_report(ROOT, [])
    assert r["ok"], r["bad"]


# ---- the core ------------------------------------------------------------------------------------


def test_a_forged_sm90_core_built_from_these_sources_passes(tmp_path: Path) -> None:
    root = _git_tree(tmp_path / "repo", {"CMakeLists.txt": b"project(x)\n", "csrc/src/a.cpp": b"int a;\n"})
    core = _forged_core(root)
    r = gc.dry_run(root, ["build/core"], core)
    assert r["ok"], r
    assert r["core"]["info"]["stale"] == []
    pack = root / "build" / "pack"  # the pack beside it, of this core
    pack.mkdir(parents=True)
    (pack / "jepa-core.tar.xz").write_bytes(b"xz")
    shutil.copy(core / "jepa-core.json", pack / "jepa-core.json")
    assert gc.dry_run(root, ["build/pack"], core, pack=pack)["ok"]


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("archs", "not sm_90 alone"),
        ("cpu", "a CPU-only build"),
        ("missing-lib", "libggml-cuda.a is missing"),
        ("extension", "Python extensions"),
        ("stale-engine", "only libjepa rebuilds"),
        ("stale-ggml", "up to an hour"),
        ("absent", "no core at"),
        ("no-pack", "no pack at"),
        ("other-pack", "is of another core"),
    ],
)
def test_the_core_check_names_what_is_wrong(tmp_path: Path, case: str, words: str) -> None:
    root = _git_tree(tmp_path / "repo", {"CMakeLists.txt": b"project(x)\n", "csrc/src/a.cpp": b"int a;\n"})
    if case == "absent":
        core = root / "build" / "core"
    else:
        core = _forged_core(
            root, archs="86-real;90-real" if case == "archs" else "90-real", cuda=case != "cpu"
        )
    if case == "missing-lib":
        (core / "lib" / "libggml-cuda.a").unlink()
    elif case == "extension":
        (core / "_engine.cpython-312-x86_64-linux-gnu.so").write_bytes(b"x")
    elif case == "stale-engine":
        (root / "csrc" / "src" / "a.cpp").write_text("int a = 1;\n")
    elif case == "stale-ggml":
        (root / "CMakeLists.txt").write_text("project(y)\n")
    pack = None
    if case.endswith("pack"):
        pack = root / "build" / "pack"
        pack.mkdir(parents=True)
        if case == "other-pack":
            (pack / "jepa-core.tar.xz").write_bytes(b"xz")
            (pack / "jepa-core.json").write_text("{}")
    r = gc.core_report(core, root, pack=pack)
    assert not r["ok"]
    assert any(words in p for p in r["problems"]), r["problems"]
    if case.startswith("stale"):
        assert gc.core_report(core, root, allow_stale=True)["ok"]  # --allow-stale: a note, not a failure


def test_the_cpu_core_is_checked_as_a_cpu_build(tmp_path: Path) -> None:
    root = _git_tree(tmp_path / "repo", {"CMakeLists.txt": b"project(x)\n"})
    core = _forged_core(root, cuda=False, archs="")
    assert gc.core_report(core, root, cuda=False)["ok"]
    assert not gc.core_report(core, root)["ok"]


@pytest.mark.skipif(
    not (CUDA_CORE / "jepa-core.json").is_file(),
    reason="needs the CUDA core (.ci/gpu_check.sh --build-core: about an hour on 2 cores); "
    "CI's fresh clone has none",
)
def test_the_built_cuda_core_passes_the_dry_run(tmp_path: Path) -> None:
    """The real carry: the core as built here plus build/gpu-carry when prepared. The engine's sources
    may have moved on since the core was built (a note then)."""
    pack = ROOT / "build" / "cuda-core" / "pack"
    carry = ["build/cuda-core/pack"] + (
        ["build/gpu-carry"] if (ROOT / "build" / "gpu-carry").is_dir() else []
    )
    r = gc.dry_run(ROOT, carry, CUDA_CORE, allow_stale=True, pack=pack)
    assert r["ok"], r
    assert r["core"]["info"]["cuda"] and r["core"]["info"]["elf_archs"] in (None, ["sm_90"])


# ---- the summary ---------------------------------------------------------------------------------


def test_the_summary_reads_steps_and_junit(tmp_path: Path) -> None:
    steps = tmp_path / "steps.tsv"
    steps.write_text("module\t0\t12\tok\nctest\t200\t0\t--quick\nparity\t1\t30\t2 failed\nbench\t124\t99\t\n")
    (tmp_path / "parity.xml").write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
        '<testcase classname="t" name="a"/><testcase classname="t" name="b"><failure/></testcase>'
        "</testsuite></testsuites>"
    )
    (tmp_path / "server.json").write_text(json.dumps({"ok": True, "runs": []}))
    s = gc.summary(steps, tmp_path, {"run": {"mode": "rehearse"}})
    assert [x["status"] for x in s["steps"]] == ["passed", "skipped", "failed", "timed out"]
    assert not s["passed"]
    assert s["parity"]["tests"] == 3 and s["parity"]["failures"] == 1 and s["parity"]["failed"] == ["t::b"]
    assert s["server"] == {"ok": True} and s["run"]["mode"] == "rehearse"


# ---- the script ----------------------------------------------------------------------------------


def test_the_script_parses_and_names_every_step_and_the_run_call() -> None:
    r = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = SCRIPT.read_text()
    for s in (
        "JEPA_PREBUILT_CORE",
        "CMAKE_CUDA_ARCHITECTURES=90-real",
        "JEPA_BUILD_PYTHON=OFF",
        "DEV=cuda:0",
        "MIXED=cpu,cuda:0",
        'JEPA_DEVICE="$DEV"',
        "tests/test_parity_vit.py",
        "tests/test_vjepa2_parity.py",
        "tests/test_reference_vjepa2_ac.py",
        "tests/test_reference_lewm.py",
        "tests/test_text_parity.py",
        "tools/bench/gpu.py",
        "ctest",
        "gpu_check.py batch",
        "gpu_check.py server",
        "command: bash .ci/gpu_check.sh --out $OUT",
        'carry:   ["build/cuda-core/pack", "build/gpu-carry"]',
    ):
        assert s in text, s
    docs = (ROOT / "docs" / "gpu-check.md").read_text()
    assert (
        "bash .ci/gpu_check.sh --out $OUT" in docs and '"build/cuda-core/pack", "build/gpu-carry"' in docs
    )


def _summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return data


@pytest.mark.transformers
def test_a_quick_rehearsal_runs_the_steps_end_to_end(tmp_path: Path) -> None:
    """--rehearse --quick: the installed module stands in for the build (no ctest), the device is the CPU,
    and every other step runs: parity and identity subsets, the batch rule, the server on one and on two
    devices, the benchmark's smoke. Everything it sends back fits the tool's 8 files."""
    out = tmp_path / "out"
    # No core, as on CI's fresh clone (whatever this checkout has built): the machine step says so and passes.
    env = {
        **os.environ,
        "GPU_CHECK_WORK": str(tmp_path / "work"),
        "GPU_CHECK_HOST_PYTHON": sys.executable,
        "GPU_CHECK_CPU_CORE_DIR": f"build/no-core-{tmp_path.name}",
    }
    done = subprocess.run(
        ["bash", str(SCRIPT), "--rehearse", "--quick", "--out", str(out), "--budget-s", "300"],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    s = _summary(out)
    steps = {x["step"]: x["status"] for x in s["steps"]}
    assert done.returncode == 0, (steps, done.stdout[-3000:], (out / "gpu-check.log").read_text()[-4000:])
    assert steps["machine"] == "passed"
    assert "core: none at" in (tmp_path / "work" / "machine.txt").read_text()
    assert steps == {
        "machine": "passed",
        "preflight": "passed",
        "module": "skipped",
        "ctest": "skipped",
        "parity": "passed",
        "identity": "passed",
        "batch": "passed",
        "server": "passed",
        "bench": "passed",
    }
    assert s["run"]["device"] == "cpu" and s["run"]["mixed"] == "cpu,cpu" and s["run"]["quick"]
    assert s["batch-rule"]["all_within_rule"] and s["server"]["ok"] and s["parity"]["failures"] == 0
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and set(files) <= {
        "summary.json",
        "gpu-check.log",
        "ctest.xml",
        "parity.xml",
        "identity.xml",
        "batch-rule.json",
        "server.json",
        "bench-gpu.json",
    }
    assert all(p.stat().st_size < 16 * MIB for p in out.iterdir())
    server = json.loads((out / "server.json").read_text())
    assert [r["devices"] for r in server["runs"]] == ["cpu", "cpu,cpu"]
    assert sum(server["runs"][1]["items_by_device_metric"].values()) == server["items"]


@pytest.mark.slow
@pytest.mark.skipif(
    not (CPU_CORE / "jepa-core.cmake").is_file() and not (CUDA_CORE / "jepa-core.cmake").is_file(),
    reason="needs a prebuilt core (.ci/gpu_check.sh --build-core [--cpu]); CI's fresh clone has none",
)
def test_the_module_builds_against_a_prebuilt_core_and_imports(tmp_path: Path) -> None:
    """Only jepa._engine against the core (no ggml, no libjepa compiled), with this python; a CUDA core's
    module says has_cuda() and imports without a GPU."""
    import sysconfig

    core = CUDA_CORE if (CUDA_CORE / "jepa-core.cmake").is_file() else CPU_CORE
    stale = gc.core_report(core, ROOT, cuda=core == CUDA_CORE, allow_stale=True)["info"].get("stale")
    if stale:
        pytest.skip(
            f"the core at {core} was built from other {' and '.join(stale)} sources than this tree's "
            "(make cuda-core / make cpu-core rebuilds it)"
        )
    build = tmp_path / "module"
    pb = subprocess.run(
        [sys.executable, "-m", "pybind11", "--cmakedir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    args = [
        "cmake",
        "-S",
        str(ROOT),
        "-B",
        str(build),
        "-G",
        "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DJEPA_PREBUILT_CORE={core}",
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-Dpybind11_DIR={pb}",
        "-DJEPA_BUILD_TESTS=OFF",
    ]
    cuda = core == CUDA_CORE
    if cuda:
        args.append(f"-DJEPA_CUBLAS_ROOT={ROOT / 'build' / 'cuda-deps' / 'nvidia' / 'cu13'}")
    subprocess.run(args, check=True, capture_output=True, timeout=300)
    built = subprocess.run(
        ["nice", "-n", "19", "cmake", "--build", str(build), "-j", "2", "-v"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "ggml" not in "".join(
        line
        for line in built.stdout.splitlines()
        if " -c " in line and ".cpp.o" in line and "third_party/ggml/src" in line
    )
    engine = next(build.glob(f"_engine*{sysconfig.get_config_var('EXT_SUFFIX')}"))
    site = tmp_path / "site"
    gc.stage(engine, site)
    code = "import jepa, jepa._engine as e; print(e.__file__, e.has_cuda())"
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT / 'server'}"}
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert got.returncode == 0, got.stderr
    path, has_cuda = got.stdout.split()
    assert Path(path).parent == site / "jepa" and has_cuda == str(cuda)
    shutil.rmtree(build)


# ---- the measured blocks -----------------------------------------------------------------------------


def test_the_docs_measured_blocks_are_what_the_record_gives() -> None:
    """docs/gpu-check.md and docs/performance.md say the core's build time and sizes as
    tests/results/gpu-core-build.json has them (`python .ci/gpu_check.py render` rewrites them)."""
    assert gc.render_docs(check=True) == []
    if gc.RECORD.is_file():
        r = json.loads(gc.RECORD.read_text())
        assert r["cuda"] and r["cuda_architectures"] == "90-real" and r["call_mib"] <= gc.LIMIT_MIB
        assert f"{r['pack_mib']:.1f} MiB" in (ROOT / "docs" / "performance.md").read_text()


def test_a_measured_block_says_the_numbers() -> None:
    r = {
        "built": "2026-12-03T07:00:00Z",
        "commit": "0123456789abcdef",
        "cpus": 2,
        "build_seconds": 3600,
        "libjepa_rebuild_seconds": 300,
        "libjepa_rebuild_files": 20,
        "total_mib": 50.0,
        "lib_mib": {"lib/libggml-cuda.a": 44.0, "lib/libjepa.a": 1.2},
        "pack_mib": 15.0,
        "tree_mib": 11.3,
        "carry_mib": 8.3,
        "call_mib": 34.6,
        "module_build_seconds": 120,
    }
    text = gc.render_measured("gpu-core", r)
    for s in (
        "60 min",
        "300 s for 20 changed files",
        "50.0 MiB",
        "libggml-cuda.a 44.0",
        "packed, 15.0 MiB",
        "34.6 MiB of 64",
        "120 s",
        "`0123456789ab`",
    ):
        assert s in text, s
    assert "60 min" in gc.render_measured("gpu-build", r) and "34.6 MiB" in gc.render_measured("gpu-build", r)


def _fatbin(entries: list[tuple[int, int]]) -> bytes:
    """A fat binary as nvcc lays one out: (kind, sm) entries, kind 2 device code (ELF), 1 PTX."""
    import struct

    body = b"".join(
        struct.pack("<HHII", kind, 0x0101, 64, 16)
        + b"\0" * 16
        + struct.pack("<I", sm)
        + b"\0" * 32
        + b"\xee" * 16
        for kind, sm in entries
    )
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


@pytest.mark.parametrize(
    ("entries", "ok"),
    [
        ([(2, 90)], True),
        ([(2, 90), (1, 90)], True),
        ([(2, 86), (2, 90)], False),
        ([(1, 90)], False),
        ([], False),
    ],
)
def test_the_device_code_is_read_from_the_archive(
    tmp_path: Path, entries: list[tuple[int, int]], ok: bool
) -> None:
    """Without cuobjdump the fat binaries in libggml-cuda.a are read directly: sm_90 device code, PTX for
    compute_90 at most beside it, nothing for another GPU."""
    root = _git_tree(tmp_path / "repo", {"CMakeLists.txt": b"project(x)\n"})
    core = _forged_core(root)
    (core / "lib" / "libggml-cuda.a").write_bytes(b"!<arch>\n" + b"\0" * 40 + _fatbin(entries) + b"\0" * 8)
    assert gc.fatbin_archs(_fatbin(entries)) == {f"{'sm' if k == 2 else 'compute'}_{s}" for k, s in entries}
    r = gc.core_report(core, root)
    assert r["ok"] is ok, r["problems"]
    if not ok:
        assert any("not sm_90 alone" in p for p in r["problems"])
