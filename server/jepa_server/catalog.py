"""What a server may serve: the -m files and every GGUF file of --models-dir, each under its id.

An id is the file's base name without .gguf, unless the directory's optional models.toml names it:

    [models.small]              # the id clients send as `model`
    file = "vit-s16-f16.gguf"   # a file of this directory (a bare name: no directories, no ..)
    aliases = ["vits"]          # more names for it (optional)
    keep_alive_s = 60           # its own --keep-alive-s (optional)

A -m file is served under --model-id (one -m only) or its base name. Every name (ids, aliases, a
file's own base name and file name) must be unique: a conflict is refused when the catalog is read,
never resolved by order. Scanning reads directory entries only, never a file's contents: a file
that is not a valid model fails its first load (503 with the reason), and `jepa-server check`
validates every header beforehand.

A directory's file name a request could not name, or that would break a log line or a metric label
(not UTF-8, unprintable characters, an empty stem such as `.gguf`), is not served: it is skipped and
logged, escaped, once. models.toml is read only when it is a regular file of at most
MAX_MODELS_TOML_BYTES (opened non-blocking: a FIFO or a device never holds the reader).
"""

from __future__ import annotations

import logging
import math
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jepa.gguf.keys import FILE_TYPE_NAMES

from .toml_files import TomlError, parse_toml

MODELS_TOML = "models.toml"
_ENTRY_KEYS = {"file", "aliases", "keep_alive_s"}
# A models.toml is a few hundred bytes; a bigger one is a mistake (or an attack on the reader).
MAX_MODELS_TOML_BYTES = 1 << 20
# A 404 or a "name a model" message lists at most this many ids (/v1/models lists them all).
LISTED_IDS = 20

log = logging.getLogger("jepa_server")


class CatalogError(ValueError):
    """The models directory or its models.toml cannot be served as given."""


def dtype_name(file_type: int) -> str:
    """general.file_type's name (jepa.gguf.keys.FILE_TYPES), or `type<n>` for a number it lacks."""
    return FILE_TYPE_NAMES.get(file_type, f"type{file_type}")


def model_paths(settings: Any) -> tuple[str, ...]:
    """The -m files of `settings` (a Settings), or the demo model's (written on first use) for --demo."""
    if settings.model:
        return tuple(settings.model)
    if settings.demo:
        import jepa.demo

        return (jepa.demo.demo_model_path(),)
    return ()


def default_model_id(path: str) -> str:
    name = os.path.basename(path)
    return name[: -len(".gguf")] if name.lower().endswith(".gguf") else name


@dataclass(frozen=True)
class ModelEntry:
    id: str
    path: str
    pinned: bool  # a -m file: loaded at startup, never unloaded
    aliases: tuple[str, ...] = ()
    keep_alive_s: float | None = None  # models.toml's, else the server's

    @property
    def file_name(self) -> str:
        return os.path.basename(self.path)

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a request may use for it."""
        out = [self.id, *self.aliases, self.file_name, default_model_id(self.path)]
        # A file models.toml names may itself have an unusable name (`.gguf`, a control character, not
        # UTF-8): it serves under its id, but "" or such a name is never one a request can use
        # (fuzz_catalog's findings).
        return tuple(dict.fromkeys(n for n in out if n and n.isprintable()))


@dataclass(frozen=True)
class Scan:
    """What one reading of the -m files and the directory found (Catalog.read): applied at once."""

    entries: dict[str, ModelEntry]
    names: dict[str, str]
    skipped: dict[str, str]  # a directory file not served -> why


@dataclass
class Catalog:
    files: Sequence[str]
    models_dir: str | None = None
    model_id: str | None = None
    _entries: dict[str, ModelEntry] = field(default_factory=dict)
    _names: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # file name -> why it is not served

    def __post_init__(self) -> None:
        self.scan()

    # -- reading

    def scan(self) -> None:
        """(Re)read the -m files and the directory; raises CatalogError on a conflict or a bad
        models.toml (the previous catalog stays in force then)."""
        self.apply(self.read())

    def read(self) -> Scan:
        """Read the -m files and the directory without changing the catalog (it touches the disk:
        the server runs it in a thread, then `apply`s it on the loop)."""
        entries: list[ModelEntry] = []
        for i, path in enumerate(self.files):
            mid = self.model_id if (self.model_id and i == 0) else default_model_id(path)
            why = unservable_id(mid)
            if why is not None:
                raise CatalogError(f"the -m file {os.fspath(path)!r} cannot be served as {mid!r}: {why}; "
                                   "name it with --model-id (or a models.toml)")
            entries.append(ModelEntry(mid, os.fspath(path), pinned=True))
        skipped: dict[str, str] = {}
        if self.models_dir is not None:
            entries += _directory(self.models_dir, skipped)
        names: dict[str, str] = {}
        by_id: dict[str, ModelEntry] = {}
        for e in entries:
            if e.id in by_id:
                raise CatalogError(f"two models are named {e.id!r}: {by_id[e.id].path} and {e.path}")
            by_id[e.id] = e
        for e in entries:
            for name in e.names:
                other = names.get(name)
                if other is not None and other != e.id:
                    raise CatalogError(f"the name {name!r} would mean both {other!r} and {e.id!r}")
                names[name] = e.id
        return Scan(by_id, names, skipped)

    def apply(self, scan: Scan) -> None:
        """Make `scan` the catalog; a file newly skipped is logged (once, escaped: a name may hold
        a newline)."""
        for name, why in scan.skipped.items():
            if self.skipped.get(name) != why:
                log.warning("models directory: the file %r is not served: %s", name, why)
        self._entries, self._names, self.skipped = scan.entries, scan.names, dict(scan.skipped)

    def find(self, name: str) -> ModelEntry | None:
        mid = self._names.get(name)
        return None if mid is None else self._entries[mid]

    def entries(self) -> list[ModelEntry]:
        return sorted(self._entries.values(), key=lambda e: (not e.pinned, e.id))

    @property
    def default(self) -> ModelEntry | None:
        """The model a request that names none gets: the first -m file, else the only model."""
        if self.files:
            return next(e for e in self._entries.values() if e.pinned and e.path == os.fspath(self.files[0]))
        only = list(self._entries.values())
        return only[0] if len(only) == 1 else None

    def ids(self) -> list[str]:
        return [e.id for e in self.entries()]


def unservable_id(mid: str) -> str | None:
    """Why `mid`, a file's stem, cannot be an id (None: it can). An id travels in JSON, log lines
    and metric labels: UTF-8 (a file name that is not decodes to lone surrogates), printable, not
    empty."""
    if not mid:
        return "its id would be empty (a file named only '.gguf')"
    try:
        mid.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not UTF-8; rename the file"
    if not mid.isprintable():
        return "its name holds an unprintable character (a newline, a tab, a control); rename the file"
    return None


def _directory(root: str, skipped: dict[str, str]) -> list[ModelEntry]:
    try:
        names = sorted(os.listdir(root))
    except OSError as exc:
        raise CatalogError(f"cannot read the models directory {root}: {exc.strerror}") from None
    ggufs = [n for n in names if n.lower().endswith(".gguf") and _is_file(os.path.join(root, n))]
    declared = _models_toml(root) if MODELS_TOML in names else {}
    taken: dict[str, str] = {}  # file -> id from models.toml
    out: list[ModelEntry] = []
    for mid, spec in declared.items():
        file = spec["file"]
        if file not in ggufs:
            raise CatalogError(f"{MODELS_TOML}: models.{mid}.file {file!r} is not a GGUF file in {root}")
        if file in taken:
            raise CatalogError(f"{MODELS_TOML}: {file!r} is named twice ({taken[file]!r} and {mid!r})")
        taken[file] = mid
        out.append(ModelEntry(mid, os.path.join(root, file), False, spec["aliases"], spec["keep_alive_s"]))
    for n in ggufs:
        if n in taken:
            continue
        why = unservable_id(default_model_id(n))
        if why is not None:
            skipped[n] = why
            continue
        out.append(ModelEntry(default_model_id(n), os.path.join(root, n), False))
    return out


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)  # a symlink to a file counts (model caches use them)
    except OSError:
        return False


def _models_toml(root: str) -> dict[str, dict[str, Any]]:
    path = os.path.join(root, MODELS_TOML)
    try:
        data = parse_toml(read_regular_file(path, MAX_MODELS_TOML_BYTES))
    except OSError as exc:
        raise CatalogError(f"cannot read {path}: {exc.strerror or exc}") from None
    except TomlError as exc:
        raise CatalogError(f"cannot read {path}: {exc}") from None
    unknown = set(data) - {"models"}
    if unknown:
        raise CatalogError(f"{path}: unknown table(s) {sorted(unknown)}; only [models.<id>] tables")
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise CatalogError(f"{path}: `models` must be a table of [models.<id>] tables")
    return {mid: _entry(path, mid, spec) for mid, spec in models.items()}


def _entry(path: str, mid: str, spec: Any) -> dict[str, Any]:
    where = f"{path}: models.{mid}"
    if not isinstance(spec, dict):
        raise CatalogError(f"{where} must be a table")
    _check_name(where, mid)
    extra = set(spec) - _ENTRY_KEYS
    if extra:
        raise CatalogError(f"{where}: unknown key(s) {sorted(extra)} (known: {sorted(_ENTRY_KEYS)})")
    file = spec.get("file")
    if not isinstance(file, str) or not file or os.path.basename(file) != file or file in (".", ".."):
        raise CatalogError(f"{where}.file must be the bare name of a file in the directory, got {file!r}")
    aliases = spec.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise CatalogError(f"{where}.aliases must be a list of strings")
    for a in aliases:
        _check_name(f"{where}.aliases", a)
    keep = spec.get("keep_alive_s")
    # TOML spells `nan` and `inf`: neither is a number of seconds (inf never unloads, and /info cannot
    # write it as JSON).
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int | float) or keep < 0
                             or not math.isfinite(keep)):
        raise CatalogError(f"{where}.keep_alive_s must be a finite number of seconds, 0 or more, "
                           f"got {keep!r}")
    return {"file": file, "aliases": tuple(aliases), "keep_alive_s": None if keep is None else float(keep)}


def _check_name(where: str, name: str) -> None:
    # Names travel in JSON and in log lines: printable, no whitespace, bounded.
    if not name or len(name) > 128 or not name.isprintable() or any(c.isspace() for c in name):
        raise CatalogError(
            f"{where}: {name!r} is not a usable model name (1..128 printable characters, no spaces)"
        )


def read_regular_file(path: str, limit: int) -> bytes:
    """The bytes of `path` if it is a regular file (a symlink to one counts) of at most `limit`
    bytes. Opened with O_NONBLOCK and checked with fstat before a byte is read: a FIFO, a device
    (/dev/zero) or a directory is refused at once. Raises OSError, or CatalogError naming why."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CatalogError(f"{path} is not a regular file")
        if st.st_size > limit:
            raise CatalogError(f"{path} is {st.st_size} bytes; at most {limit / 2**20:g} MiB are read")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew since fstat
        raise CatalogError(f"{path} is over {limit} bytes ({limit / 2**20:g} MiB)")
    return data


def describe(entries: Iterable[ModelEntry], limit: int = LISTED_IDS) -> str:
    """'a', 'b' and 'c' -- for messages; past `limit` ids, the first ones and how many more."""
    ids = [repr(e.id) for e in entries]
    if not ids:
        return "no model"
    if len(ids) > limit:
        return ", ".join(ids[:limit]) + f" and {len(ids) - limit} more (GET /v1/models lists them all)"
    return ids[0] if len(ids) == 1 else ", ".join(ids[:-1]) + " and " + ids[-1]
