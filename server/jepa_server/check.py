"""`jepa-server check`: a preflight that exits non-zero with its reasons (a systemd ExecStartPre).

It reads the settings exactly as `jepa-server` does (flags > JEPA_* > --config TOML > defaults) and
checks, without loading a model: every -m file and every GGUF file of --models-dir is a readable
regular file whose GGUF header is a jepa file of schema v1 of a family this build serves, with a
preprocessing recipe whose output its own encoder takes (jepa.gguf.keys.recipe_conflict), the
models directory is readable and its models.toml (if any) names no file twice and no name twice,
the files root (if set) is a readable directory, and the port is free. With --warm [MODEL] it also
loads one model (the default one, or MODEL: an id the server would serve, or a path), runs the
server's smoke test on it (one encode of the model's native shape) and frees it again."""

from __future__ import annotations

import argparse
import errno
import os
import socket
import stat
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .catalog import Catalog, CatalogError, model_paths
from .settings import Settings, SettingsError, load_settings, subcommand_args


@dataclass(frozen=True)
class Finding:
    ok: bool
    what: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.what}"


def _model_file(path: str) -> list[Finding]:
    try:
        st = os.stat(path)
    except OSError as exc:
        return [Finding(False, f"model {path}: {exc.strerror}")]
    if not stat.S_ISREG(st.st_mode):
        return [Finding(False, f"model {path}: not a regular file")]
    if not os.access(path, os.R_OK):
        return [Finding(False, f"model {path}: not readable by this user")]
    return [Finding(True, f"model {path}: a readable file of {st.st_size / 2**20:.1f} MiB"), _header(path)]


def _header(path: str) -> Finding:
    """The GGUF header, read by jepa.gguf.header (bounded: only the keys named here are
    kept, every string is checked as the engine checks it, no tensor data is read)."""
    from jepa.errors import JepaError
    from jepa.gguf.header import read_header
    from jepa.gguf.keys import FAMILIES, RECIPE_KEYS, recipe_conflict

    try:
        h = read_header(path, {"general.architecture", "jepa.schema_version", "jepa.family", *RECIPE_KEYS})
    except JepaError as exc:  # ModelFileError (malformed) or ResourceLimitError (over the budget)
        return Finding(False, f"model {path}: {exc}")
    arch, version, family = h.get("general.architecture"), h.get("jepa.schema_version"), h.get("jepa.family")
    if arch != "jepa":
        return Finding(False, f"model {path}: general.architecture is {arch!r}, not 'jepa'")
    if version != 1:
        return Finding(False, f"model {path}: jepa.schema_version is {version!r}; this build reads 1")
    if family not in FAMILIES:
        return Finding(False, f"model {path}: jepa.family {family!r} is not one this build runs")
    if h.data_end > h.file_size:
        return Finding(False, f"model {path}: truncated (its tensors need {h.data_end} bytes)")
    why = recipe_conflict({key: h.values[key] for key in RECIPE_KEYS if key in h.values})
    if why:
        return Finding(False, f"model {path}: {why}")
    return Finding(True, f"model {path}: a jepa GGUF (family {family}, {len(h.tensors)} tensors)")


def _files_root(s: Settings) -> list[Finding]:
    if s.files_root is None:
        return []
    root = os.fspath(s.files_root)
    if not os.path.isdir(root) or not os.access(root, os.R_OK | os.X_OK):
        return [Finding(False, f"files root {root}: not a readable directory")]
    return [Finding(True, f"files root {root}: a readable directory")]


def _port(s: Settings) -> Finding:
    if s.port == 0:
        return Finding(True, "port 0: the server picks a free one")
    family = socket.AF_INET6 if ":" in s.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((s.host, s.port))
        except OSError as exc:
            why = "in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            return Finding(False, f"{s.host}:{s.port}: cannot bind ({why})")
    return Finding(True, f"{s.host}:{s.port}: free")


def _warm(path: str, s: Settings) -> Finding:
    import jepa

    from .workers import smoke_call

    t0 = time.perf_counter()
    try:
        model = jepa.Model(path, device=s.device, mmap=not s.no_mmap)
        ctx = model.context(threads=s.graph_threads)
        smoke_call(model)(ctx)
        del ctx, model
    except jepa.JepaError as exc:
        return Finding(False, f"model {path}: loads but cannot serve ({type(exc).__name__}: {exc})")
    return Finding(True, f"model {path}: loaded, one encode ran (the smoke test), freed "
                         f"({time.perf_counter() - t0:.2f} s)")


def _models_dir(s: Settings) -> tuple[list[Finding], Catalog | None]:
    if s.models_dir is None:
        return [], None
    root = os.fspath(s.models_dir)
    if not os.path.isdir(root) or not os.access(root, os.R_OK | os.X_OK):
        return [Finding(False, f"models dir {root}: not a readable directory")], None
    try:
        catalog = Catalog(model_paths(s), root, s.model_id)
    except CatalogError as exc:
        return [Finding(False, f"models dir {root}: {exc}")], None
    found = [e for e in catalog.entries() if not e.pinned]
    ids = ", ".join(e.id for e in found) or "none"
    out = [Finding(True, f"models dir {root}: {len(found)} model(s): {ids}")]
    for e in found:
        out += _model_file(e.path)
    return out, catalog


def _warm_target(s: Settings, catalog: Catalog | None, name: str) -> str | Finding:
    if catalog is None:
        catalog = Catalog(model_paths(s), None, s.model_id)
    if not name:
        entry = catalog.default
        if entry is None:
            return Finding(False, f"--warm: name the model to warm (this setup serves {catalog.ids()})")
        return entry.path
    entry = catalog.find(name)
    if entry is not None:
        return entry.path
    if os.path.isfile(name):
        return name
    return Finding(False, f"--warm {name}: neither a model this setup serves ({catalog.ids()}) nor a file")


def preflight(s: Settings, warm: str | None = None) -> list[Finding]:
    """Every check, in order; the server would not start if any fails. `warm`: None, "" (the default
    model) or the model to load and smoke-test."""
    paths = model_paths(s)
    if not paths and s.models_dir is None:
        return [Finding(False, "no model: give -m FILE or --models-dir DIR (or --demo)")]
    found: list[Finding] = []
    for path in paths:
        found += _model_file(path)
    in_dir, catalog = _models_dir(s)
    found += in_dir + _files_root(s) + [_port(s)]
    if warm is not None and all(f.ok for f in found):
        target = _warm_target(s, catalog, warm)
        found.append(target if isinstance(target, Finding) else _warm(target, s))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """jepa-server check [--warm [MODEL]] [the server's own flags]."""
    def own_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--warm", nargs="?", const="", default=None, metavar="MODEL")

    args = subcommand_args("check", __doc__ or "", "[--warm [MODEL]]", argv, own_flags)
    if args is None:
        return 0
    own, rest = args
    try:
        s = load_settings(rest)
    except SettingsError as exc:
        print(f"FAIL settings: {exc}")
        return 1
    found = preflight(s, warm=own.warm)
    for f in found:
        print(f.line())
    failed = [f for f in found if not f.ok]
    print(f"jepa-server check: {len(failed)} problem(s)" if failed else "jepa-server check: ready")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
