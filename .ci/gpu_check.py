#!/usr/bin/env python3
""".ci/gpu_check.sh's Python half: what it checks before it goes (dry-run), how it lays out the
engine it built (stage), and the checks that are not pytest suites (batch, server), then the summary.

    python .ci/gpu_check.py dry-run --core build/cuda-core/dist --carry build/cuda-core/dist build/gpu-carry
    python .ci/gpu_check.py core-info --core build/cuda-core/dist --src . --build-seconds 3600
    python .ci/gpu_check.py stage --engine BUILD/_engine*.so --site DIR
    python .ci/gpu_check.py batch --device cuda:0 --out OUT/batch-rule.json [--quick]
    python .ci/gpu_check.py server --device cuda:0 --mixed cpu,cuda:0 --out OUT/server.json [--quick]
    python .ci/gpu_check.py summary --steps STEPS.tsv --out OUT/summary.json [--dry-run FILE] ...

The dry-run is what the device tool would refuse or what the GPU machine could not load, found here:
the working tree that travels (tracked + untracked-not-ignored files, shared/ inside the checkout,
the carry paths) against the tool's 64 MiB; the core (exists, a CUDA build for sm_90 only, built from
these sources, holding no Python extension); and the Python the GPU machine has (3.12): no carried
extension or wheel built for another CPython. docs/gpu-check.md says how it all fits together."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 64  # the device tool's working tree limit (tracked + untracked + shared/ + carry)
GPU_PYTHON = (3, 12)  # the GPU machine's python3 (/work/.library/device/KINDS.md: 3.12.3, torch 2.11 + cu130)
GPU_ARCH = "90"  # an H200 (and H100): sm_90
MIB = 1 << 20

# What the core's sources are: a core built from other sources is stale. ggml and the CMake file
# decide the hour-long part; the engine's sources only libjepa (minutes).
SOURCE_SETS = {
    "ggml": ("csrc/third_party/ggml", "CMakeLists.txt"),
    "engine": ("csrc/src", "csrc/include"),
}


# ---- sizes ---------------------------------------------------------------------------------------


def tree_files(root: Path) -> list[str]:
    """The paths that travel with the working tree: tracked and untracked-not-ignored files (git's
    view), existing ones only (a tracked file deleted in the work tree does not travel)."""
    r = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
    )
    if r.returncode != 0:  # no git here (a copy of the tree): every file but build/ and .git/
        return sorted(
            str(p.relative_to(root))
            for p in walk(root)
            if p.relative_to(root).parts[0] not in ("build", ".git")
        )
    names = sorted({n for n in r.stdout.decode("utf-8", "surrogateescape").split("\0") if n})
    return [n for n in names if os.path.lexists(root / n)]


def walk(path: Path) -> Iterator[Path]:
    """Every file (and link, as a link) under path, or path itself when it is one."""
    if path.is_symlink() or path.is_file():
        yield path
        return
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            yield Path(dirpath) / f


def _size(p: Path) -> int:
    return p.lstat().st_size  # a link travels as a link; a sparse file counts at its full length


def size_report(root: Path, carry: Iterable[str], limit_mib: float = LIMIT_MIB) -> dict[str, Any]:
    """What one device call takes along, in bytes, against the limit."""
    seen: set[Path] = set()
    tree = 0
    for n in tree_files(root):
        p = (root / n).absolute()
        seen.add(p)
        tree += _size(p)
    parts: dict[str, int] = {"tree": tree}
    shared = root / "shared"
    if shared.is_dir() and not shared.is_symlink():
        parts["shared/"] = sum(_size(p) for p in walk(shared) if p.absolute() not in seen)
        seen.update(p.absolute() for p in walk(shared))
    missing = []
    for c in carry:
        p = root / c
        if not os.path.lexists(p):
            missing.append(c)
            continue
        n = 0
        for f in walk(p):
            a = f.absolute()
            if a not in seen:
                seen.add(a)
                n += _size(f)
        parts[c] = n
    total = sum(parts.values())
    return {
        "bytes": parts,
        "total_bytes": total,
        "total_mib": round(total / MIB, 2),
        "limit_mib": limit_mib,
        "missing_carry": missing,
        "ok": total <= limit_mib * MIB and not missing,
    }


# ---- the Python the GPU machine has -----------------------------------------------------------------

_EXT = re.compile(r"\.cpython-(\d)(\d+)[^/]*\.so(\.\d+)*$")
_WHEEL = re.compile(
    r"^(?P<name>[^-]+)-(?P<ver>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)


def wheel_fits(name: str, py: tuple[int, int] = GPU_PYTHON) -> bool:
    """Whether a wheel of this file name installs on CPython py on x86-64 Linux."""
    m = _WHEEL.match(name)
    if not m:
        return False
    tags = {
        (p, a, pl) for p in m["py"].split(".") for a in m["abi"].split(".") for pl in m["plat"].split(".")
    }
    cp = f"cp{py[0]}{py[1]}"
    for p, a, pl in tags:
        if pl != "any" and "x86_64" not in pl:
            continue
        if a == "none" and (p.startswith(f"py{py[0]}") or p == cp):
            return True
        if a == "abi3" and p.startswith(f"cp{py[0]}") and int(p[3:] or 0) <= py[1]:
            return True
        if p == cp and a in (cp, f"{cp}m"):
            return True
    return False


def _starts_with(p: Path, magic: bytes) -> bool:
    """Whether the file at p begins with magic (False where it cannot be read)."""
    try:
        with p.open("rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


def _elf_needs_libpython(p: Path) -> str | None:
    """The libpython an ELF file names in its dynamic section, if any (read with readelf when present)."""
    if not _starts_with(p, b"\x7fELF"):
        return None
    tool = shutil.which("readelf")
    if tool is None:
        return None
    out = subprocess.run([tool, "-d", str(p)], capture_output=True, text=True).stdout
    m = re.search(r"\[(libpython\d\.\d+[^\]]*)\]", out)
    return m.group(1) if m else None


def python_report(root: Path, carry: Iterable[str], py: tuple[int, int] = GPU_PYTHON) -> dict[str, Any]:
    """Nothing that travels is a CPython extension, wheel or program for another Python than py."""
    bad: list[str] = []
    files = [root / n for n in tree_files(root)]
    for c in carry:
        if os.path.lexists(root / c):
            files.extend(walk(root / c))
    for p in files:
        rel = str(p.relative_to(root)) if p.is_relative_to(root) else str(p)
        if p.is_symlink():
            continue
        m = _EXT.search(p.name)
        if m and (int(m[1]), int(m[2])) != py:
            bad.append(f"{rel}: a CPython {m[1]}.{m[2]} extension (the GPU machine has {py[0]}.{py[1]})")
            continue
        if p.suffix == ".whl" and not wheel_fits(p.name, py):
            bad.append(f"{rel}: a wheel that does not install on CPython {py[0]}.{py[1]} x86-64")
            continue
        if p.suffix in (".so", "") or ".so." in p.name:
            lib = _elf_needs_libpython(p)
            if lib and not lib.startswith(f"libpython{py[0]}.{py[1]}"):
                bad.append(f"{rel}: linked to {lib}")
    return {"python": f"{py[0]}.{py[1]}", "bad": bad, "ok": not bad}


# ---- the core -----------------------------------------------------------------------------------------


def sources_digest(src: Path) -> dict[str, str]:
    """sha256 of each SOURCE_SETS set under src (relative path and bytes of every file, sorted)."""
    out = {}
    for key, paths in SOURCE_SETS.items():
        h = hashlib.sha256()
        for rel in paths:
            base = src / rel
            files = sorted(walk(base)) if base.exists() else []
            for f in files:
                if "__pycache__" in f.parts:
                    continue
                h.update(str(f.relative_to(src)).encode() + b"\0")
                h.update(f.read_bytes() if not f.is_symlink() else os.readlink(f).encode())
        out[key] = h.hexdigest()
    return out


def _cuda_tool(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/local/cuda/bin") / name,) if p.is_file()), None
    )


_FATBIN = struct.pack("<I", 0xBA55ED50)  # a CUDA fat binary's magic


def fatbin_archs(data: bytes) -> set[str]:
    """The code in every CUDA fat binary in data: "sm_XX" for device code (ELF), "compute_XX" for PTX.
    (The layout nvcc writes: a 16-byte header (magic, version, header size, payload size), then entries
    of kind (1 PTX, 2 ELF), version, header size, padded payload size, ..., the SM version at +28.)"""
    found: set[str] = set()
    i = data.find(_FATBIN)
    while i != -1:
        if i + 16 <= len(data):
            _magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", data, i)
            j, end = i + hsize, min(i + hsize + fsize, len(data))
            while j + 32 <= end:
                kind, _v, ehs, padded = struct.unpack_from("<HHII", data, j)
                if kind not in (1, 2) or ehs < 32:
                    break
                sm = struct.unpack_from("<I", data, j + 28)[0]
                found.add(f"{'sm' if kind == 2 else 'compute'}_{sm}")
                j += ehs + padded
        i = data.find(_FATBIN, i + 4)
    return found


def elf_archs(lib: Path) -> list[str] | None:
    """The code for which GPUs a static library holds: sm_XX (device code) and compute_XX (PTX), read
    with cuobjdump where it is installed, else from the fat binaries themselves; None when lib is not
    an archive."""
    if not _starts_with(lib, b"!<arch>\n"):
        return None
    tool = _cuda_tool("cuobjdump")
    if tool is not None:
        r = subprocess.run([tool, "--list-elf", "--list-ptx", str(lib)], capture_output=True, text=True)
        if r.returncode == 0:
            return sorted(set(re.findall(r"\.((?:sm|compute)_\d+[a-z]?)\.", r.stdout)))
    return sorted(fatbin_archs(lib.read_bytes()))


# One parameter a line, as the project writes long signatures: `duplicates` pairs this one with
# jepa.world.rollout's by shape alone (defaults of other names); nothing is shared to write once.
def core_report(
    core: Path,
    root: Path,
    arch: str = GPU_ARCH,
    cuda: bool = True,
    allow_stale: bool = False,
    pack: Path | None = None,
) -> dict[str, Any]:
    """The prebuilt core exists, is what the GPU machine needs and was built from these sources; and
    its pack (what travels: jepa-core.tar.xz beside a copy of its jepa-core.json) is of this core."""
    problems: list[str] = []
    notes: list[str] = []
    info_path = core / "jepa-core.json"
    if not (core / "jepa-core.cmake").is_file() or not info_path.is_file():
        return {
            "core": str(core),
            "ok": False,
            "problems": [
                f"no core at {core} (jepa-core.cmake, jepa-core.json): build it with "
                "`.ci/gpu_check.sh --build-core` (about an hour on 2 cores)"
            ],
        }
    info = json.loads(info_path.read_text())
    if bool(info.get("cuda")) != cuda:
        problems.append(f"the core is {'a CUDA' if info.get('cuda') else 'a CPU-only'} build")
    if cuda:
        archs = [a for a in str(info.get("cuda_architectures", "")).split(";") if a]
        wanted = re.compile(rf"^{arch}[a-z]?(-real|-virtual)?$")
        if not archs or not all(wanted.match(a) for a in archs):
            problems.append(f"the core's CUDA architectures are {archs or 'none'}, not sm_{arch} alone")
    for lib in info.get("libs", []):
        if not (core / lib).is_file():
            problems.append(f"{lib} is missing from the core")
    if cuda:
        cuda_lib = core / "lib" / "libggml-cuda.a"
        found = elf_archs(cuda_lib) if cuda_lib.is_file() else None
        if found is None:
            notes.append("the device code's architectures not read (libggml-cuda.a is not an archive)")
        elif f"sm_{arch}" not in found or not set(found) <= {f"sm_{arch}", f"compute_{arch}"}:
            problems.append(f"libggml-cuda.a holds code for {found or 'no GPU'}, not sm_{arch} alone")
        info["elf_archs"] = found
    exts = [
        str(p.relative_to(core)) for p in walk(core) if _EXT.search(p.name) or p.name.startswith("_engine")
    ]
    if exts:
        problems.append(
            f"the core holds Python extensions ({', '.join(exts)}): it must be Python-independent"
        )
    if pack is not None:
        packed = pack / "jepa-core.json"
        if not (pack / "jepa-core.tar.xz").is_file() or not packed.is_file():
            problems.append(
                f"no pack at {pack} (jepa-core.tar.xz, jepa-core.json): .ci/gpu_check.sh --pack"
            )
        elif packed.read_bytes() != info_path.read_bytes():
            problems.append(f"the pack at {pack} is of another core than {core}: .ci/gpu_check.sh --pack")
    built = info.get("sources_sha256")
    if built is None:
        notes.append(
            "the core records no source digest (core-info was not run): not checked against the tree"
        )
    else:
        now = sources_digest(root)
        stale = [k for k in SOURCE_SETS if built.get(k) != now[k]]
        if stale:
            what = {
                "ggml": "ggml or CMakeLists.txt (make cuda-core: up to an hour when ggml's flags changed)",
                "engine": "the engine's sources (only libjepa rebuilds: minutes)",
            }
            msg = "the core was built from other sources than the tree's: " + "; ".join(
                what[k] for k in stale
            )
            (notes if allow_stale else problems).append(msg)
        info["stale"] = stale
    return {"core": str(core), "info": info, "problems": problems, "notes": notes, "ok": not problems}


def dry_run(
    root: Path,
    carry: list[str],
    core: Path | None,
    *,
    cuda: bool = True,
    arch: str = GPU_ARCH,
    py: tuple[int, int] = GPU_PYTHON,
    limit_mib: float = LIMIT_MIB,
    allow_stale: bool = False,
    pack: Path | None = None,
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "size": size_report(root, carry, limit_mib),
        "python": python_report(root, carry, py),
    }
    if core is not None:
        report["core"] = core_report(core, root, arch, cuda, allow_stale, pack)
    report["ok"] = all(v["ok"] for v in report.values() if isinstance(v, dict))
    return report


def print_dry_run(r: dict[str, Any]) -> None:
    s = r["size"]
    print(
        f"size: {s['total_mib']} MiB of {s['limit_mib']} MiB "
        + ", ".join(f"{k} {v / MIB:.2f}" for k, v in s["bytes"].items())
        + (" ok" if s["ok"] else " TOO LARGE")
    )
    for m in s["missing_carry"]:
        print(f"  carry path missing: {m}")
    p = r["python"]
    print(f"python {p['python']}: " + ("nothing built for another Python" if p["ok"] else "PROBLEMS"))
    for b in p["bad"]:
        print(f"  {b}")
    if "core" in r:
        c = r["core"]
        info = c.get("info", {})
        print(
            f"core {c['core']}: "
            + ("ok" if c["ok"] else "PROBLEMS")
            + (
                f" (cuda {info.get('cuda')}, archs {info.get('cuda_architectures')!r},"
                f" elf {info.get('elf_archs')})"
                if info
                else ""
            )
        )
        for x in c["problems"]:
            print(f"  {x}")
        for x in c.get("notes", []):
            print(f"  note: {x}")
    print("dry-run: " + ("ok" if r["ok"] else "FAILED"))


def core_info(core: Path, src: Path, build_seconds: float | None) -> dict[str, Any]:
    """Add the source digest, the commit, the build time and the sizes to the core's jepa-core.json."""
    path = core / "jepa-core.json"
    info = json.loads(path.read_text())
    info["sources_sha256"] = sources_digest(src)
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    info["commit"] = r.stdout.strip() or None
    if build_seconds is not None:
        info["build_seconds"] = round(build_seconds)
    info["bytes"] = {
        str(p.relative_to(core)): _size(p) for p in sorted(walk(core)) if p.name != "jepa-core.json"
    }
    info["total_mib"] = round(sum(info["bytes"].values()) / MIB, 2)
    info["built"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path.write_text(json.dumps(info, indent=1) + "\n")
    return info


def core_record(core: Path, pack: Path, extra: dict[str, Any]) -> dict[str, Any]:
    """What tests/results/gpu-core-build.json keeps of a built core: its build, its sizes, what travels."""
    info = json.loads((core / "jepa-core.json").read_text())
    keep = (
        "version",
        "cuda",
        "cuda_architectures",
        "cuda_compiler_version",
        "native",
        "openmp",
        "fa_quants",
        "cxx_compiler",
        "commit",
        "built",
        "build_seconds",
        "total_mib",
        "sources_sha256",
    )
    packed = sum(_size(p) for p in walk(pack))
    return {
        **{k: info[k] for k in keep if info.get(k) not in (None, "")},
        "lib_mib": {k: round(v / MIB, 2) for k, v in info["bytes"].items() if k.startswith("lib/")},
        "pack_mib": round(packed / MIB, 2),
        "cpus": os.cpu_count(),
        **extra,
    }


RECORD = ROOT / "tests" / "results" / "gpu-core-build.json"
MEASURED = re.compile(
    r"(<!-- BEGIN MEASURED: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- END MEASURED: (?P=name) -->)", re.S
)
DOCS_MEASURED = {"gpu-check.md": "gpu-core", "performance.md": "gpu-build"}


def render_measured(name: str, r: dict[str, Any]) -> str:
    """The docs' measured blocks, from tests/results/gpu-core-build.json."""
    libs = ", ".join(
        f"{k.removeprefix('lib/')} {v:.1f}" for k, v in sorted(r["lib_mib"].items(), key=lambda kv: -kv[1])
    )
    when = f"Measured {r['built'][:10]} at commit `{str(r['commit'])[:12]}` on {r['cpus']} shared cores"
    if name == "gpu-core":
        return (
            f"{when} (`tests/results/gpu-core-build.json`): the first build of the CUDA core took "
            f"{r['build_seconds'] / 60:.0f} min (niced, beside other work); after an engine change "
            f"only libjepa rebuilds ({r['libjepa_rebuild_seconds']:.0f} s for "
            f"{r['libjepa_rebuild_files']:.0f} changed files). The core is "
            f"{r['total_mib']:.1f} MiB "
            f"(MiB: {libs}) and travels packed, {r['pack_mib']:.1f} MiB: with the tree "
            f"({r['tree_mib']:.1f} MiB) and build/gpu-carry ({r['carry_mib']:.1f} MiB) a call takes "
            f"{r['call_mib']:.1f} MiB of 64. The module alone against it built in "
            f"{r['module_build_seconds']:.0f} s here (5 files and an LTO link on 2 busy cores; no ggml or "
            f"engine source compiled), and imports without a GPU: has_cuda() is true, and a model asked "
            f"for cuda:0 is refused with the engine's error.\n"
        )
    return (
        f"{when}: the CUDA core (ggml's CUDA backend for sm_90 and libjepa) took "
        f"{r['build_seconds'] / 60:.0f} min to build; {r['pack_mib']:.1f} MiB of it travel, and a call "
        f"takes {r['call_mib']:.1f} MiB of the tool's 64 ([gpu-check.md](gpu-check.md)).\n"
    )


def render_docs(check: bool, record: Path = RECORD) -> list[str]:
    """Rewrite (or, check: compare) the measured blocks; returns the docs that were stale."""
    if not record.is_file():
        return []
    r = json.loads(record.read_text())
    stale = []
    for doc, block in DOCS_MEASURED.items():
        path = ROOT / "docs" / doc
        text = path.read_text()

        def one(m: re.Match[str], block: str = block) -> str:
            return m.group(1) + render_measured(block, r) + m.group(4) if m["name"] == block else m.group(0)

        new = MEASURED.sub(one, text)
        if new != text:
            stale.append(doc)
            if not check:
                path.write_text(new)
    return stale


# ---- staging the module -------------------------------------------------------------------------------

SITECUSTOMIZE = """\
# Written by .ci/gpu_check.py stage. jepa is imported from this folder (the staged package with the
# module built for this check), so an editable install's redirecting finder must not answer first.
import sys

sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
"""

AV_STUB = '''\
"""A stand-in for PyAV, written by .ci/gpu_check.py stage where python3 has none: jepa.media imports
it at load; the GPU check decodes no video, and any use says so."""


class _Missing:
    def __getattr__(self, name):
        raise ImportError("PyAV is not installed here (.ci/gpu_check.py stage put this stand-in)")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise ImportError(f"PyAV is not installed here (av.{name}; .ci/gpu_check.py stage put this stand-in)")
'''


def stage(engine: Path, site: Path, root: Path = ROOT) -> dict[str, Any]:
    """site/jepa = python/jepa + the module built here; site/sitecustomize.py; a PyAV stand-in when the
    running python has none. PYTHONPATH=site:server then imports this jepa."""
    site.mkdir(parents=True, exist_ok=True)
    dest = site / "jepa"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(root / "python" / "jepa", dest, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy2(engine, dest / engine.name)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    av_stub = False
    try:
        import av  # noqa: F401
    except ImportError:
        (site / "av").mkdir(exist_ok=True)
        (site / "av" / "__init__.py").write_text(AV_STUB)
        av_stub = True
    return {"site": str(site), "engine": engine.name, "av_stub": av_stub}


# ---- the batch rule on a device -----------------------------------------------------------------------

BATCH_RULE = 1e-6  # batched within this of single (max |d| / max |single|, f32)


def _batch_models(work: Path, quick: bool) -> list[tuple[str, str]]:
    from jepa.demo import write_demo_model
    from jepa.testing.random_vjepa2 import write_random_vjepa2

    models = [("vit-demo", write_demo_model(work / "vit-demo.gguf", n_layer=2 if quick else 4))]
    if not quick:
        models.append(
            ("vit-s16", write_demo_model(work / "vit-s16.gguf", embed_dim=384, n_layer=12, n_head=6))
        )
    models.append(
        (
            "vjepa2-tiny",
            write_random_vjepa2(
                work / "vjepa2.gguf", embed_dim=64, n_layer=2, n_head=2, img_size=48, n_frames=4
            ),
        )
    )
    return models


def _input_shape(info: Any) -> tuple[int, ...]:
    if int(getattr(info, "n_frames", 1) or 1) > 1:
        return (int(info.in_chans), int(info.n_frames), int(info.img_size), int(info.img_size))
    return (int(info.in_chans), int(info.img_size), int(info.img_size))


def batch_rule(device: str, quick: bool = False, seed: int = 0) -> dict[str, Any]:
    """Each model's tokens for B inputs at once against the same inputs one at a time, on device."""
    import numpy as np

    import jepa

    batches = (2, 4) if quick else (2, 8, 32)
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in _batch_models(Path(tmp), quick):
            model = jepa.Model(path, device=device)
            shape = _input_shape(model.info)
            rng = np.random.default_rng(seed)
            x = rng.standard_normal((max(batches), *shape)).astype(np.float32)
            for flash in (False, True):
                ctx = model.context(threads=2, flash_attn=flash)
                single = np.concatenate([ctx.encode(x[i : i + 1]) for i in range(len(x))])
                for b in batches:
                    got = ctx.encode(x[:b])
                    ref = single[:b]
                    scale = float(np.abs(ref).max()) or 1.0
                    rel = float(np.abs(got.astype(np.float64) - ref).max()) / scale
                    cells.append(
                        {
                            "model": name,
                            "flash_attn": flash,
                            "batch": b,
                            "max_rel": float(f"{rel:.3g}"),
                            "bit_identical": bool(np.array_equal(got.view(np.uint32), ref.view(np.uint32))),
                            "within_rule": rel <= BATCH_RULE,
                        }
                    )
                    print(json.dumps(cells[-1]), flush=True)
    return {
        "device": device,
        "rule": f"batched within {BATCH_RULE} of single (max |d| / max |single|, f32)",
        "cells": cells,
        "all_within_rule": all(c["within_rule"] for c in cells),
        "all_bit_identical": all(c["bit_identical"] for c in cells),
    }


# ---- the server on one and on two devices --------------------------------------------------------------


def _import_tool(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


class _Server:
    """`python -m jepa_server --demo --port 0 ...` in a subprocess, its URL read from its startup line."""

    def __init__(self, args: list[str]) -> None:
        from jepa_server.startup import read_startup

        self.err = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jepa_server", *args], stdout=subprocess.PIPE, stderr=self.err, text=True
        )
        assert self.proc.stdout is not None
        self.url, self.startup = read_startup(self.proc.stdout, 120.0)
        if not self.url:
            raise RuntimeError(f"jepa-server did not start: {self.startup} {self.close()}")

    def close(self) -> str:
        _import_tool("processes").stop(self.proc)
        self.err.seek(0)
        text = self.err.read()
        self.err.close()
        return text


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    import urllib.request

    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


def _metrics(url: str) -> dict[str, float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "jepa_device_items_total":
                out[s.labels["device"]] = out.get(s.labels["device"], 0.0) + float(s.value)
    return out


def server_check(device: str, mixed: str, quick: bool = False) -> dict[str, Any]:
    """The demo model served on `device` alone and on `mixed` (one queue, two devices): every answer is
    bit for bit jepa.embed's for that item on a device the server holds (single-item graphs,
    --max-batch 1, so batching cannot change a bit)."""
    import base64

    import numpy as np

    import jepa
    from jepa.demo import demo_model_path

    png = _import_tool("media_samples").png_bytes
    n = 8 if quick else 32
    items = [png(300 + i, (64 + i, 48 + 2 * i)) for i in range(n)]
    path = demo_model_path()
    devices = list(dict.fromkeys([device, *[d.strip() for d in mixed.split(",") if d.strip()]]))
    refs: dict[str, np.ndarray] = {}
    for d in devices:
        ctx = jepa.Model(path, device=d).context(threads=2)
        refs[d] = np.stack([jepa.embed(ctx, [it])[0] for it in items])
    same = {
        f"{a}|{b}": bool(np.array_equal(refs[a].view(np.uint32), refs[b].view(np.uint32)))
        for i, a in enumerate(devices)
        for b in devices[i + 1 :]
    }

    def serve(devs: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        srv = _Server(
            [
                "--demo",
                "--port",
                "0",
                "--devices",
                devs,
                "--max-batch",
                "1",
                "--max-wait-ms",
                "0",
                "--threads",
                "2",
            ]
        )
        answers: list[np.ndarray | None] = [None] * n
        errors: list[str] = []

        def one(i: int) -> None:
            try:
                body = _post(
                    srv.url + "/v1/embeddings",
                    {"input": [{"b64": base64.b64encode(items[i]).decode()}], "encoding_format": "base64"},
                )
                answers[i] = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), "<f4")
            except Exception as exc:  # reported, not raised: the other requests still count
                errors.append(f"item {i}: {exc!r}")

        try:
            threads = [
                threading.Thread(target=one, args=(i,)) for i in range(n)
            ]  # all at once: both devices busy
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            per_device = _metrics(srv.url)
        finally:
            log = srv.close()
        held = [d.strip() for d in devs.split(",")]
        matched: dict[str, int] = {d: 0 for d in dict.fromkeys(held)}
        unmatched = []
        for i, a in enumerate(answers):
            if a is None:
                continue
            who = [d for d in matched if np.array_equal(a.view(np.uint32), refs[d][i].view(np.uint32))]
            if who:
                for d in who:
                    matched[d] += 1
            else:
                unmatched.append(i)
        return {
            "devices": devs,
            "answers": sum(a is not None for a in answers),
            "errors": errors[:5],
            "matched_bits_of": matched,
            "unmatched": unmatched,
            "items_by_device_metric": per_device,
            "ok": not errors and not unmatched and all(a is not None for a in answers),
            "seconds": round(time.perf_counter() - t0, 1),
            "log_tail": log[-2000:] if errors else "",
        }

    runs = [serve(device), serve(mixed)]
    return {
        "device": device,
        "mixed": mixed,
        "items": n,
        "refs_bit_identical_across_devices": same,
        "runs": runs,
        "ok": all(r["ok"] for r in runs),
        "rule": "each answer bit for bit jepa.embed's for that item on one of the server's devices "
        "(--max-batch 1: one item per graph)",
    }


# ---- the summary ----------------------------------------------------------------------------------------


def junit_counts(path: Path) -> dict[str, Any] | None:
    """tests / failures / errors / skipped summed over a JUnit XML file's test suites."""
    if not path.is_file():
        return None
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    counts = {k: sum(int(s.get(k, 0) or 0) for s in suites) for k in keys}
    failed = [
        f"{c.get('classname', '')}::{c.get('name', '')}"
        for s in suites
        for c in s.iter("testcase")
        if c.find("failure") is not None or c.find("error") is not None
    ]
    return {**counts, "failed": failed[:50]}


# Steps whose failures are findings, not a failed check: the CPU's bit-identity promises asked of a GPU.
REPORT_ONLY = {"identity"}


def summary(steps_tsv: Path, out_dir: Path, extra: dict[str, Any]) -> dict[str, Any]:
    steps = []
    for line in steps_tsv.read_text().splitlines():
        if not line.strip():
            continue
        name, rc, seconds, *note = line.split("\t")
        code = int(rc)
        status = {0: "passed", 124: "timed out", 137: "killed (time)", 200: "skipped"}.get(code, "failed")
        steps.append(
            {
                "step": name,
                "rc": code,
                "status": status,
                "seconds": float(seconds),
                "note": note[0] if note else "",
            }
        )
    data: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "steps": steps,
        "passed": all(s["status"] in ("passed", "skipped") for s in steps if s["step"] not in REPORT_ONLY),
        "report_only": sorted(REPORT_ONLY),
        **extra,
    }
    for name in ("ctest.xml", "parity.xml", "identity.xml"):
        c = junit_counts(out_dir / name)
        if c is not None:
            data[name.split(".")[0]] = c
    for name in ("batch-rule.json", "server.json", "bench-gpu.json"):
        p = out_dir / name
        if p.is_file():
            try:
                d = json.loads(p.read_text())
            except json.JSONDecodeError:
                continue
            brief = {
                k: d[k]
                for k in ("all_within_rule", "all_bit_identical", "ok", "gpu", "smoke", "budget_exhausted")
                if k in d
            }
            data[name.removesuffix(".json")] = brief
    return data


# ---- the command line ----------------------------------------------------------------------------------


def _write(out: Path | None, data: dict[str, Any]) -> None:
    text = json.dumps(data, indent=1) + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dry-run", help="what the device call takes along and meets, checked here")
    d.add_argument("--root", type=Path, default=ROOT)
    d.add_argument("--core", type=Path, default=None)
    d.add_argument("--cpu-core", action="store_true", help="the core is a CPU build (the rehearsal's)")
    d.add_argument(
        "--pack", type=Path, default=None, help="the core's pack (what travels), checked against it"
    )
    d.add_argument("--carry", nargs="*", default=[])
    d.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    d.add_argument("--python", default=f"{GPU_PYTHON[0]}.{GPU_PYTHON[1]}")
    d.add_argument(
        "--allow-stale", action="store_true", help="a core built from other sources: a note, not a failure"
    )
    d.add_argument("--json", type=Path, default=None)
    c = sub.add_parser("core-info", help="record the source digest, commit, build time and sizes in the core")
    c.add_argument("--core", type=Path, required=True)
    c.add_argument("--src", type=Path, default=ROOT)
    c.add_argument("--build-seconds", type=float, default=None)
    rec = sub.add_parser("record", help="a built core's facts -> tests/results/gpu-core-build.json")
    rec.add_argument("--core", type=Path, required=True)
    rec.add_argument("--pack", type=Path, required=True)
    rec.add_argument("--set", nargs="*", default=[], metavar="KEY=NUMBER", help="measured numbers to add")
    rec.add_argument("--out", type=Path, default=ROOT / "tests" / "results" / "gpu-core-build.json")
    rd = sub.add_parser("render", help="the docs' measured blocks from tests/results/gpu-core-build.json")
    rd.add_argument("--check", action="store_true", help="fail when a block is not what the record gives")
    s = sub.add_parser("stage", help="lay out python/jepa with a built module for PYTHONPATH")
    s.add_argument("--engine", type=Path, required=True)
    s.add_argument("--site", type=Path, required=True)
    b = sub.add_parser("batch", help="the batch rule on a device -> JSON")
    b.add_argument("--device", default="cuda:0")
    b.add_argument("--quick", action="store_true")
    b.add_argument("--out", type=Path, default=None)
    v = sub.add_parser("server", help="the server on one device and on two -> JSON")
    v.add_argument("--device", default="cuda:0")
    v.add_argument("--mixed", default="cpu,cuda:0")
    v.add_argument("--quick", action="store_true")
    v.add_argument("--out", type=Path, default=None)
    m = sub.add_parser("summary", help="the steps' results and the checks' verdicts -> summary.json")
    m.add_argument("--steps", type=Path, required=True)
    m.add_argument("--out-dir", type=Path, required=True)
    m.add_argument("--extra", type=Path, nargs="*", default=[], help="JSON files merged in under their stem")
    a = p.parse_args(argv)

    run: dict[str, Callable[[], int]] = {}

    def do_dry() -> int:
        py = tuple(int(x) for x in a.python.split("."))
        r = dry_run(
            a.root.resolve(),
            a.carry,
            a.core if a.core is None else (a.root / a.core),
            cuda=not a.cpu_core,
            py=(py[0], py[1]),
            limit_mib=a.limit_mib,
            allow_stale=a.allow_stale,
            pack=None if a.pack is None else a.root / a.pack,
        )
        print_dry_run(r)
        if a.json:
            _write(a.json, r)
        return 0 if r["ok"] else 1

    def do_core() -> int:
        info = core_info(a.core, a.src, a.build_seconds)
        print(f"core {a.core}: {info['total_mib']} MiB, sources {info['sources_sha256']}")
        return 0

    def do_record() -> int:
        extra = {k: float(v) for k, v in (x.split("=", 1) for x in a.set)}
        _write(a.out, core_record(a.core, a.pack, extra))
        print(f"wrote {a.out}")
        return 0

    def do_render() -> int:
        stale = render_docs(a.check)
        if stale:
            print(("stale: " if a.check else "rewrote: ") + ", ".join(stale))
        return 1 if stale and a.check else 0

    def do_stage() -> int:
        print(json.dumps(stage(a.engine, a.site)))
        return 0

    def do_batch() -> int:
        r = batch_rule(a.device, a.quick)
        _write(a.out, r)
        print(
            f"batch rule on {a.device}: {len(r['cells'])} cells, within {BATCH_RULE}: {r['all_within_rule']},"
            " "
            f"bit-identical: {r['all_bit_identical']}"
        )
        return 0 if r["all_within_rule"] else 1

    def do_server() -> int:
        r = server_check(a.device, a.mixed, a.quick)
        _write(a.out, r)
        print(
            "server: "
            + "; ".join(
                f"{x['devices']}: {x['answers']} answers, bits of {x['matched_bits_of']}, "
                f"items by device {x['items_by_device_metric']}"
                for x in r["runs"]
            )
            + f" -> {'ok' if r['ok'] else 'FAILED'}"
        )
        return 0 if r["ok"] else 1

    def do_summary() -> int:
        extra = {}
        for f in a.extra:
            if f.is_file():
                try:
                    extra[f.stem] = json.loads(f.read_text())
                except json.JSONDecodeError:
                    extra[f.stem] = f.read_text()[-4000:]
        r = summary(a.steps, a.out_dir, extra)
        _write(a.out_dir / "summary.json", r)
        for st in r["steps"]:
            print(f"  {st['step']:<14} {st['status']:<14} {st['seconds']:7.1f} s  {st['note']}")
        reported = [st["step"] for st in r["steps"] if st["step"] in REPORT_ONLY and st["status"] != "passed"]
        print(
            "gpu check: "
            + ("every step passed" if r["passed"] else "SOME STEPS FAILED")
            + (f" (reported, not counted: {', '.join(reported)})" if reported else "")
        )
        return 0 if r["passed"] else 1

    run.update(
        {
            "dry-run": do_dry,
            "record": do_record,
            "render": do_render,
            "core-info": do_core,
            "stage": do_stage,
            "batch": do_batch,
            "server": do_server,
            "summary": do_summary,
        }
    )
    return run[a.cmd]()


if __name__ == "__main__":
    raise SystemExit(main())
