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
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MODELS_TOML = "models.toml"
# general.file_type values (gguf-py's LlamaFileType): 32 is bf16 (30 is the bf16 *tensor* type).
_DTYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 7: "q8_0", 8: "q5_0", 9: "q5_1", 15: "q4_k", 32: "bf16"}
_ENTRY_KEYS = {"file", "aliases", "keep_alive_s"}


class CatalogError(ValueError):
    """The models directory or its models.toml cannot be served as given."""


def dtype_name(file_type: int) -> str:
    return _DTYPES.get(file_type, f"type{file_type}")


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
        return tuple(dict.fromkeys(out))


@dataclass
class Catalog:
    files: Sequence[str]
    models_dir: str | None = None
    model_id: str | None = None
    _entries: dict[str, ModelEntry] = field(default_factory=dict)
    _names: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.scan()

    # -- reading

    def scan(self) -> None:
        """(Re)read the -m files and the directory; raises CatalogError on a conflict or a bad
        models.toml (the previous catalog stays in force then)."""
        entries: list[ModelEntry] = []
        for i, path in enumerate(self.files):
            mid = self.model_id if (self.model_id and i == 0) else default_model_id(path)
            entries.append(ModelEntry(mid, os.fspath(path), pinned=True))
        if self.models_dir is not None:
            entries += _directory(self.models_dir)
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
        self._entries, self._names = by_id, names

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


def _directory(root: str) -> list[ModelEntry]:
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
    out += [ModelEntry(default_model_id(n), os.path.join(root, n), False) for n in ggufs if n not in taken]
    return out


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)  # a symlink to a file counts (model caches use them)
    except OSError:
        return False


def _models_toml(root: str) -> dict[str, dict[str, Any]]:
    path = os.path.join(root, MODELS_TOML)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:  # TOML is UTF-8 only
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


def describe(entries: Iterable[ModelEntry]) -> str:
    """'a', 'b' and 'c' -- for messages."""
    ids = [repr(e.id) for e in entries]
    if not ids:
        return "no model"
    return ids[0] if len(ids) == 1 else ", ".join(ids[:-1]) + " and " + ids[-1]
