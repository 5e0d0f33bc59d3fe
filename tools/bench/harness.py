"""What every benchmark shares, written once: where its JSON goes, the command line every one takes
(--smoke, --quick, --threads, --out, --cpu), the run's record (when, at which commit, the machine and
what its CPU was held to, the versions), the load the rest of the machine put on a run, the
interleaved rounds and the ratios paired within them, and the JSON record itself.

A benchmark is a module of this package, run as a script from anywhere:

    python tools/bench/engine.py --smoke            # tiny sizes, every code path (its test runs this)
    python tools/bench/engine.py --cpu x86-64-v3    # stand for an AVX2-only CPU (JEPA_CPU_FEATURES)

Each module starts the same way: run as a script, it puts tools/ on the path (not tools/bench/, whose
module names would hide packages such as `ray`) and numpy's OpenBLAS on one thread (its threads spin
after start-up and steal the engines' cycles); then `bench.harness.parse` holds the CPU to --cpu and
the peers to the same class (bench.cpu) before anything imports jepa or a peer."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from bench import cpu

TOOLS = Path(__file__).resolve().parents[1]
ROOT = TOOLS.parent
RESULTS = ROOT / "tests" / "results"
TMP = Path(tempfile.gettempdir())
ISO = "%Y-%m-%dT%H:%M:%S%z"
# A CPU class's results are <name>-<suffix>.json; the AVX2 class's files were named before
# JEPA_CPU_FEATURES existed (`--isa avx2`), and the docs render them under that name.
CLASS_SUFFIX = {"x86-64-v3": "avx2"}
T = TypeVar("T")


# ---- the command line ------------------------------------------------------------------------------


def parser(doc: str | None, *, smoke: str = "tiny sizes, every code path, few rounds (its test runs this)",
           quick: str | None = None, threads: int | None = 2,
           threads_help: str = "threads for every engine") -> argparse.ArgumentParser:
    """The options every benchmark takes: --smoke, --quick (where it has a quick mode: its help),
    --threads (where it takes a thread count: the default), --out and --cpu."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--smoke", action="store_true", help=smoke)
    if quick is not None:
        mode.add_argument("--quick", action="store_true", help=quick)
    if threads is not None:
        p.add_argument("--threads", type=int, default=threads, help=f"{threads_help} (default {threads})")
    p.add_argument("--out", type=Path, default=None,
                   help="the JSON to write (default: the module's docstring says; --smoke and --quick write "
                   f"to {TMP})")
    p.add_argument("--cpu", metavar="CLASS", default=None,
                   help="stand for a smaller CPU: JEPA_CPU_FEATURES=CLASS for jepa and the run's children, "
                   "the peers held to it where they have a switch (the classes: python -c "
                   "'import jepa.cpu as c; print(c.cpu_classes())')")
    return p


def parse(p: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments, then the CPU held (hold): call it first in main, before jepa or a peer loads."""
    args = p.parse_args(argv)
    args.held_env = hold(args.cpu)
    for flag in ("smoke", "quick"):
        if not hasattr(args, flag):
            setattr(args, flag, False)
    return args


def hold(mask: str | None = None) -> dict[str, str]:
    """--cpu: JEPA_CPU_FEATURES=mask (the engine reads it once, at load, so before jepa is imported);
    then the peers' switches to the same class (cpu.apply_peer_env), before any peer is imported.
    Returns the peers' switches in force."""
    if mask:
        if "jepa._engine" in sys.modules and os.environ.get("JEPA_CPU_FEATURES") != mask:
            raise SystemExit("--cpu after jepa was imported: the engine has read JEPA_CPU_FEATURES already")
        os.environ["JEPA_CPU_FEATURES"] = mask
    refused = cpu.info().mask_error
    if refused:
        raise SystemExit(f"JEPA_CPU_FEATURES={os.environ.get('JEPA_CPU_FEATURES')!r}: {refused}")
    return cpu.apply_peer_env()


def out_path(args: argparse.Namespace, name: str, full: Path | None = None) -> Path:
    """--out, else: --smoke and --quick in the temp folder (never over a committed result); a full run
    to `full` (default tests/results/<name>.json), <name>-<class>.json under a CPU mask."""
    if args.out is not None:
        return Path(args.out)
    if args.smoke or args.quick:
        return TMP / f"{name}-{'smoke' if args.smoke else 'quick'}.json"
    mask = cpu.info().mask
    if mask:
        suffix = CLASS_SUFFIX.get(mask, "".join(c if c.isalnum() or c in "-_" else "_" for c in mask))
        return RESULTS / f"{name}-{suffix}.json"
    return full or RESULTS / f"{name}.json"


# ---- the run's record --------------------------------------------------------------------------------


def git_commit() -> str:
    """HEAD, with '+dirty' when the engine's sources (csrc/, python/) differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "csrc", "python"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def engine_path() -> Path:
    """The engine's extension file, as jepa says it loaded it (jepa.engine_file)."""
    try:
        import jepa
    except ImportError as exc:
        raise SystemExit(f"jepa's engine is not built (make install): {exc}") from exc
    return Path(jepa.engine_file())


def engine_fingerprint() -> str:
    """The installed engine's build: its file's mtime and a hash of its bytes. A rebuild during a run
    (another engineer's `make`) changes it, and crashes processes that have it mapped."""
    import hashlib

    engine = engine_path()
    built = time.strftime(ISO, time.localtime(engine.stat().st_mtime))
    return f"{built} sha256:{hashlib.sha256(engine.read_bytes()).hexdigest()[:16]}"


def version_of(name: str) -> str:
    """A module's __version__ by its import name ("torch"), else the installed distribution's by its
    name ("cc-vjepa2", "pillow")."""
    try:
        return str(importlib.import_module(name).__version__)
    except (ImportError, ValueError, AttributeError):
        from importlib.metadata import version

        return version(name)


def versions(*modules: str) -> dict[str, str]:
    """The versions block: jepa's, ggml's and the engine file's, each named module's (see version_of),
    numpy's and Python's."""
    import numpy

    import jepa

    return {"jepa": jepa.__version__, "ggml": jepa.ggml_version(), "engine": engine_fingerprint(),
            **{m: version_of(m) for m in modules}, "numpy": numpy.__version__,
            "python": platform.python_version()}


@dataclass
class Run:
    """What a run notes when it starts (a commit or a rebuild while it goes on is not what it
    measured), and the record's common head when it ends."""

    benchmark: str
    threads: int
    smoke: bool = False
    quick: bool = False
    modules: tuple[str, ...] = ()  # the peers whose versions the record keeps
    started: str = field(default_factory=lambda: time.strftime(ISO))
    t0: float = field(default_factory=time.perf_counter)
    commit: str = field(default_factory=git_commit)
    versions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.versions = {**versions(*self.modules), **self.versions}

    def seconds(self) -> float:
        return round(time.perf_counter() - self.t0, 1)

    def engine_changed(self) -> bool:
        return engine_fingerprint() != self.versions["engine"]

    def head(self, **machine: Any) -> dict[str, Any]:
        """benchmark, started, seconds, smoke, quick, commit, machine (cpu.machine, plus `machine`),
        held (cpu.held: what each engine was held to) and versions."""
        return {"benchmark": self.benchmark, "started": self.started, "seconds": self.seconds(),
                "smoke": self.smoke, "quick": self.quick, "commit": self.commit,
                "machine": {**cpu.machine(self.threads), **machine}, "held": cpu.held(),
                "versions": self.versions}


def write_record(out: Path, data: Mapping[str, Any], indent: int = 1) -> None:
    """A benchmark's JSON record to `out` (its folder made if missing), newline-terminated."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=indent) + "\n")


# ---- the load ------------------------------------------------------------------------------------------


def machine_busy_s() -> float:
    """CPU-seconds all processes on the machine have used since boot (/proc/stat; 0 where absent)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def self_busy_s() -> float:
    """CPU-seconds of this process and its children that have exited."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def process_busy_s(pid: int) -> float:
    """CPU-seconds of another process, all its threads (0 where /proc is absent)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Load:
    """The CPU taken while a block ran: by this process, by the processes `pids` (a server under
    test), and by everything else on the machine (others), each as a share of all the cores."""

    def __init__(self, pids: Sequence[int] = ()) -> None:
        self.pids = list(pids)
        self.cores = os.cpu_count() or 1
        self.seconds = self.machine_s = self.self_s = self.pids_s = 0.0
        self.load_avg = [0.0, 0.0]

    def _now(self) -> tuple[float, float, float, float]:
        theirs = sum(process_busy_s(p) for p in self.pids)
        return (time.perf_counter(), machine_busy_s(), self_busy_s(), theirs)

    def __enter__(self) -> Load:
        self.load_avg[0] = os.getloadavg()[0]
        self._start = self._now()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        end = self._now()
        self.seconds, self.machine_s, self.self_s, self.pids_s = (b - a for a, b in zip(self._start, end,
                                                                                         strict=True))
        self.load_avg[1] = os.getloadavg()[0]

    def share(self, cpu_s: float, seconds: float | None = None) -> float:
        """cpu_s as a share of the cores over the block (or `seconds`), in [0, 1]: /proc counts in
        10 ms ticks, so a short block can read a little past either end."""
        wall = (seconds if seconds is not None else self.seconds) * self.cores
        return round(min(1.0, max(0.0, cpu_s / wall)), 3) if wall > 0 else 0.0

    @property
    def others_s(self) -> float:
        return self.machine_s - self.self_s - self.pids_s

    def others(self, seconds: float | None = None) -> float:
        """The share of the cores everything but this process and `pids` took."""
        return self.share(self.others_s, seconds)

    def record(self) -> dict[str, Any]:
        """What a cell records of the load: the others' share, the load average around it, its length."""
        return {"others_cpu_share": self.others(),
                "load_avg_before_after": [round(v, 2) for v in self.load_avg],
                "seconds": round(self.seconds, 1)}


# ---- interleaved rounds --------------------------------------------------------------------------------


def rotated(names: Sequence[T], r: int) -> list[T]:
    """Round r's order: the names rotated by r, so each goes first in turn and a burst of load from
    elsewhere falls on all of them alike."""
    k = r % len(names) if names else 0
    return [*names[k:], *names[:k]]


@dataclass
class Rounds:
    """Interleaved rounds' results: each variant's seconds per timed call, and its first output."""

    samples: dict[str, list[float]]
    outputs: dict[str, Any]

    def medians(self, scale: float = 1.0) -> dict[str, float]:
        return {k: statistics.median(v) * scale for k, v in self.samples.items()}

    def best(self, scale: float = 1.0) -> dict[str, float]:
        return {k: min(v) * scale for k, v in self.samples.items()}

    def paired(self, peers: Sequence[str], den: str) -> float | None:
        return paired(self.samples, peers, den)


def interleave(runs: Mapping[str, Callable[[], Any]], rounds: int, warmup: int = 0, *,
               before_timed: Callable[[dict[str, Any]], None] | None = None, pause_s: float = 0.0,
               log: Callable[[int, str, float], None] | None = None) -> Rounds:
    """Every variant once a round, the order rotating (rotated); the first `warmup` rounds untimed.
    before_timed gets the first outputs once the warm-up rounds are done (when there are some);
    pause_s is slept before each call (a runtime's worker threads go idle before the next starts);
    log(round, name, seconds) follows every call."""
    names = list(runs)
    samples: dict[str, list[float]] = {n: [] for n in names}
    outputs: dict[str, Any] = {}
    for r in range(warmup + rounds):
        if before_timed is not None and warmup and r == warmup:
            before_timed(outputs)
        for n in rotated(names, r):
            if pause_s:
                time.sleep(pause_s)
            t0 = time.perf_counter()
            out = runs[n]()
            dt = time.perf_counter() - t0
            outputs.setdefault(n, out)
            if r >= warmup:
                samples[n].append(dt)
            if log is not None:
                log(r, n, dt)
    return Rounds(samples, outputs)


def paired(samples: Mapping[str, Sequence[float]], peers: Sequence[str], den: str) -> float | None:
    """Median over rounds of (the fastest of `peers` in that round) / samples[den]: the variants of a
    round run back to back, so a burst of load mostly hits both sides of a pair. None when this run
    measured den or none of the peers."""
    present = [p for p in peers if p in samples]
    if den not in samples or not present:
        return None
    per_round = zip(*(samples[p] for p in present), samples[den], strict=True)
    return statistics.median(min(r[:-1]) / r[-1] for r in per_round)


def sig(x: float, digits: int = 3) -> float:
    """x to `digits` significant digits (what the records keep of an error)."""
    return float(f"{float(x):.{digits}g}")


def log(*parts: Any) -> None:
    """A progress line on stderr (stdout is the record's, where a benchmark prints one)."""
    print(*parts, file=sys.stderr, flush=True)
