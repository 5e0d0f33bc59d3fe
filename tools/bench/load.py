#!/usr/bin/env python3
"""What a cold load costs: jepa.Model on a ViT-L/16 file, read into memory of its own (mmap=False,
the engine before weights were mapped) against memory-mapped (mmap=True, the default), with the
file in the page cache (warm) and out of it (cold) -> tests/results/bench-load.json

Every cell is a fresh child process (python tools/bench/load.py --child ...), so nothing is cached
in the process itself. A child imports jepa, then measures:

  load_s         jepa.Model(path, mmap=...) alone
  first_s        the first encode of one 224 px image after it (a mapped file pays its page faults
                 here, not in the load: the sum is what a first request costs)
  rss_mb         VmRSS growth over the load and the first encode, split into anon (memory of the
                 process's own) and file (pages of the mapped file, shared with the page cache and
                 every other process mapping it)
  pss_mb         the proportional set size growth (smaps_rollup): shared pages divided among the
                 processes mapping them

"Cold" drops the file's pages from the page cache first (posix_fadvise DONTNEED: no root needed) and
checks with mincore-free timing only, so a cold cell on a machine whose page cache cannot be
dropped reads as warm. The "two processes" cells start a second child on the same file while the
first still holds it, and report both children's RSS and PSS: with the file mapped, the second one's
file pages are the first one's.

Models: ViT-L/16 (1024 wide, 24 blocks, 224 px) with random weights (jepa.demo.write_demo_model,
numpy only) as f16 (the issue's 609 MB file: most bytes are matrices the engine's own CPU kernel
repacks, so they need a copy of their own whatever the loading), and the same file in q8_0
(jepa-quantize: ggml's kernels run it as stored, so every byte is used in place from the mapping).
Cells run interleaved, rounds rotating (bench.harness.rotated), medians reported; the record's head
(commit, machine, the CPU held, versions) is bench.harness's.

    python tools/bench/load.py            # the full run (a few minutes; writes ~1 GB of models)
    python tools/bench/load.py --smoke    # a tiny model, one round: the test suite runs it
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/load.py: bench from tools/
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench import harness

VIT_L = dict(embed_dim=1024, n_layer=24, n_head=16, img_size=224, patch_size=16)
SMOKE = dict(embed_dim=64, n_layer=2, n_head=2, img_size=32, patch_size=16)


# -- the child: one load, measured from inside


def _status() -> dict[str, int]:
    """VmRSS, RssAnon, RssFile (KiB) from /proc/self/status, and Pss from smaps_rollup."""
    out: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(line.split()[1])
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            out["Pss"] = int(line.split()[1])
    return out


def child(path: str, mmap: bool, hold: bool) -> None:
    import numpy as np

    import jepa

    before = _status()
    t0 = time.perf_counter()
    model = jepa.Model(path, mmap=mmap)
    load_s = time.perf_counter() - t0
    after_load = _status()
    ctx = model.context(threads=1)
    size = int(model.info.img_size)
    x = np.zeros((1, 3, 1, size, size), np.float32)
    t0 = time.perf_counter()
    ctx.encode(x)
    first_s = time.perf_counter() - t0
    after = _status()

    def mb(key: str, end: dict[str, int]) -> float:
        return (end.get(key, 0) - before.get(key, 0)) / 1024

    report = {
        "load_s": load_s,
        "first_s": first_s,
        "rss_load_mb": mb("VmRSS", after_load),
        "rss_mb": mb("VmRSS", after),
        "anon_mb": mb("RssAnon", after),
        "file_mb": mb("RssFile", after),
        "pss_mb": mb("Pss", after),
        "n_bytes_mb": model.info.n_bytes / 2**20,
        "n_bytes_mapped_mb": model.info.n_bytes_mapped / 2**20,
    }
    print(json.dumps(report), flush=True)
    if hold:  # the parent reads a second child's figures while this one still maps the file
        sys.stdin.readline()
        report["pss_while_shared_mb"] = mb("Pss", _status())
        print(json.dumps(report), flush=True)


# -- the parent


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _spawn(path: Path, mmap: bool, hold: bool) -> subprocess.Popen[str]:
    cmd = [sys.executable, __file__, "--child", str(path), "--mmap" if mmap else "--read"]
    if hold:
        cmd.append("--hold")
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _read(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"bench.load: a child exited with {proc.wait()} before reporting")
    return json.loads(line)


def one(path: Path, mmap: bool, cold: bool) -> dict[str, Any]:
    if cold:
        drop_cache(path)
    proc = _spawn(path, mmap, hold=False)
    report = _read(proc)
    if proc.wait() != 0:
        raise SystemExit("bench.load: a child failed")
    return report


def two(path: Path, mmap: bool) -> dict[str, Any]:
    """Two processes on one file (warm): the second's figures while the first still maps it."""
    first = _spawn(path, mmap, hold=True)
    a = _read(first)
    second = _spawn(path, mmap, hold=True)
    b = _read(second)
    out = {}
    for name, proc in (("first", first), ("second", second)):
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        out[name] = _read(proc)
        proc.wait()
    out["first"]["alone"] = a
    out["second"]["alone"] = b
    return out


def _median(samples: list[dict[str, Any]]) -> dict[str, float]:
    keys = [k for k, v in samples[0].items() if isinstance(v, float)]
    return {k: statistics.median(s[k] for s in samples) for k in keys}


def write_models(tmp: Path, smoke: bool) -> dict[str, Path]:
    import jepa.demo
    from jepa.convert.quantize import quantize

    shape = SMOKE if smoke else VIT_L
    f16 = Path(jepa.demo.write_demo_model(tmp / "vit-l16-f16.gguf", ftype="f16", **shape))
    q8 = tmp / "vit-l16-q8_0.gguf"
    quantize(str(f16), str(q8), "q8_0")
    return {"f16": f16, "q8_0": q8}


def options() -> argparse.ArgumentParser:
    p = harness.parser(__doc__, smoke="a tiny model, one round (its test runs this)", threads=None)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--child", metavar="PATH", help=argparse.SUPPRESS)
    p.add_argument("--mmap", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--read", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    return p


def measure(models: dict[str, Path], rounds: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every (file, read or mapped, cold or warm) cell once a round, the order rotating; then the
    two-process pairs. The cells by name, with their runs and medians, and the pairs."""
    cells = [(m, mode, cache) for m in models for mode in ("read", "mmap") for cache in ("cold", "warm")]
    samples: dict[tuple[str, str, str], list[dict[str, Any]]] = {c: [] for c in cells}
    for r in range(rounds):
        for m, mode, cache in harness.rotated(cells, r):
            samples[m, mode, cache].append(one(models[m], mode == "mmap", cache == "cold"))
    shared = {f"{m}-{mode}": two(models[m], mode == "mmap") for m in models for mode in ("read", "mmap")}
    out = {f"{m}-{mode}-{cache}": {"model": m, "mode": mode, "cache": cache, "median": _median(runs),
                                   "runs": runs}
           for (m, mode, cache), runs in samples.items()}  # fmt: skip
    return out, shared


def ratios_of(cells: dict[str, Any], models: dict[str, Path]) -> dict[str, dict[str, float]]:
    """Read over mapped: the load, the load and first encode; mapped over read: the RSS."""
    ratios = {}
    for m in models:
        for cache in ("cold", "warm"):
            read, mapped = cells[f"{m}-read-{cache}"]["median"], cells[f"{m}-mmap-{cache}"]["median"]
            ratios[f"{m}-{cache}"] = {
                "load": read["load_s"] / max(mapped["load_s"], 1e-9),
                "load_and_first": (read["load_s"] + read["first_s"])
                / max(mapped["load_s"] + mapped["first_s"], 1e-9),
                "rss": mapped["rss_mb"] / max(read["rss_mb"], 1e-9),
            }
    return ratios


def main(argv: list[str] | None = None) -> int:
    args = harness.parse(options(), argv)
    if args.child:
        child(args.child, args.mmap, args.hold)
        return 0
    rounds = 1 if args.smoke else args.rounds
    out = harness.out_path(args, "bench-load")
    run = harness.Run("bench-load", 1, args.smoke)
    with tempfile.TemporaryDirectory(prefix="jepa-bench-load-") as tmp:
        models = write_models(Path(tmp), args.smoke)
        cells, shared = measure(models, rounds)
        sizes = {m: path.stat().st_size / 2**20 for m, path in models.items()}
    data = {
        **run.head(),
        "tool": "tools/bench/load.py",
        "engine_changed_during_run": run.engine_changed(),
        "rounds": rounds,
        "model_shape": SMOKE if args.smoke else VIT_L,
        "file_mb": sizes,
        "cells": cells,
        "two_processes": shared,
        "ratios": ratios_of(cells, models),
    }
    harness.write_record(out, data)
    for name, c in cells.items():
        med = c["median"]
        harness.log(f"{name:18s} load {med['load_s'] * 1000:8.1f} ms  first {med['first_s'] * 1000:7.1f} ms  "
                    f"rss {med['rss_mb']:7.1f} MiB (anon {med['anon_mb']:7.1f}, file {med['file_mb']:7.1f})")
    harness.log(f"wrote {out}")
    return 1 if data["engine_changed_during_run"] else 0


if __name__ == "__main__":
    sys.exit(main())
