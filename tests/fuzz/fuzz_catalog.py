"""atheris target: bytes -> a models directory and its models.toml, read by the server's catalog
(jepa_server.catalog.Catalog): file names of any bytes (not UTF-8, newlines, `.gguf` alone, very
long), entries that are not regular files (a FIFO, a directory, a link to /dev/zero, a dangling
link), and models.toml as raw bytes or built from the format's own pieces (ids, files, aliases,
keep_alive_s of every number TOML spells: nan, inf, negative, huge). Only CatalogError may escape; what
the catalog accepts must be servable: printable names (valid UTF-8, no control characters, not
empty), finite keep-alives, files inside the directory.

    python tests/fuzz/fuzz_catalog.py -max_total_time=60 -dict=tests/fuzz/catalog.dict \\
        /tmp/catalog-work tests/fuzz/corpus/catalog        # docs/fuzzing.md
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import atheris
from harness import instrument, run

from jepa_server import catalog
from jepa_server.catalog import Catalog, CatalogError

_ROOT = Path(tempfile.mkdtemp(prefix="jepa-fuzz-catalog-"))
instrument("jepa_server")

_KEEP = ["0", "1.5", "-1", "nan", "inf", "-inf", "1e308", "true", '"60"', "[]", "9" * 40]
_KINDS = ("file", "fifo", "dir", "zero", "dangling")


def _name(fdp: atheris.FuzzedDataProvider) -> bytes:
    raw = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40))
    pick = fdp.ConsumeIntInRange(0, 3)
    if pick == 0:
        raw += b".gguf"
    elif pick == 1:
        raw = fdp.PickValueInList(
            [b".gguf", b"a\nb.gguf", b"caf\xe9.gguf", b"x" * 250 + b".gguf", b"models.toml"]
        )
    raw = raw.replace(b"/", b"_").replace(b"\0", b"_")[:255]
    return raw if raw not in (b"", b".", b"..") else b"_"


def _entry(fdp: atheris.FuzzedDataProvider, d: Path, name: bytes) -> None:
    path = os.path.join(os.fsencode(d), name)
    kind = fdp.PickValueInList(list(_KINDS)) if fdp.ConsumeIntInRange(0, 3) == 0 else "file"
    try:
        if kind == "file":  # non-blocking: the name may be a FIFO made above (ENXIO then, skipped)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 16)))
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "dir":
            os.mkdir(path)
        elif kind == "zero":
            os.symlink("/dev/zero", path)
        else:
            os.symlink(os.fsencode(d) + b"/missing", path)
    except OSError:  # the name taken by an earlier entry of another kind: the directory as it is
        pass


def _toml(fdp: atheris.FuzzedDataProvider, names: list[bytes]) -> bytes:
    if fdp.ConsumeBool():
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 400))
    lines = []
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        mid = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 12))
        lines.append(f"[models.{json.dumps(mid)}]")
        if names and fdp.ConsumeBool():
            lines.append(f"file = {json.dumps(os.fsdecode(fdp.PickValueInList(names)))}")
        else:
            lines.append(f"file = {json.dumps(fdp.ConsumeUnicodeNoSurrogates(12))}")
        if fdp.ConsumeBool():
            aliases = [fdp.ConsumeUnicodeNoSurrogates(8) for _ in range(fdp.ConsumeIntInRange(0, 3))]
            lines.append(f"aliases = {json.dumps(aliases)}")
        if fdp.ConsumeBool():
            lines.append(f"keep_alive_s = {fdp.PickValueInList(_KEEP)}")
    return "\n".join(lines).encode("utf-8", "surrogateescape")


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    d = _ROOT / "models"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    names = [_name(fdp) for _ in range(fdp.ConsumeIntInRange(0, 6))]
    for n in names:
        _entry(fdp, d, n)
    if fdp.ConsumeBool():
        toml = d / catalog.MODELS_TOML
        if toml.is_dir() and not toml.is_symlink():  # made by a file name above: the directory stays
            toml = d / "unused"
        toml.unlink(missing_ok=True)
        if fdp.ConsumeIntInRange(0, 7) == 0:  # not a regular file: must be refused, never read
            fdp.PickValueInList([lambda: os.mkfifo(toml), lambda: os.symlink("/dev/zero", toml)])()
        else:
            toml.write_bytes(_toml(fdp, names))
    cat = Catalog(files=(), models_dir=str(d))
    root = os.path.realpath(d)
    for e in cat.entries():
        for name in e.names:
            assert name and name.isprintable(), name  # no control characters, valid UTF-8, not empty
            assert cat.find(name) is not None
        assert os.path.dirname(os.path.realpath(e.path)) == root or os.path.islink(e.path), e.path
        if e.keep_alive_s is not None:
            assert math.isfinite(e.keep_alive_s) and e.keep_alive_s >= 0, e
        json.dumps({"id": e.id, "aliases": list(e.aliases), "keep": e.keep_alive_s}, allow_nan=False)
    catalog.describe(cat.entries())


if __name__ == "__main__":
    run(one_input, (CatalogError,))
