"""What docs/gguf.md documents, read back from its rendered tables: the converters' tests check
that a file they write holds only documented keys and tensors, and every documented required one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

DOC = Path(__file__).resolve().parents[1] / "docs" / "gguf.md"


def _rows(block: str) -> list[list[str]]:
    lines = [line for line in block.splitlines() if line.startswith("| `")]
    return [[c.strip() for c in line.split("|")[1:-1]] for line in lines]


def documented_keys(scopes: set[str]) -> tuple[set[str], set[str]]:
    """(every key, the required keys) the key table lists for any of these scopes ("in" column)."""
    doc = DOC.read_text()
    block = doc[doc.index("<!-- BEGIN GENERATED: gguf-keys -->"):]
    block = block[:block.index("<!-- END GENERATED")]
    rows = [r for r in _rows(block) if scopes & set(r[2].split(" / "))]
    names = {r[0].strip("`") for r in rows}
    return names, {r[0].strip("`") for r in rows if r[3] == "**required**"}


def documented_tensors(title: str) -> tuple[set[str], set[str]]:
    """(every tensor, the required tensors) of one part's table, names with {i}."""
    doc = DOC.read_text()
    part = doc[doc.index(f"**{title}**"):]
    part = part[:part.index("\n\n**") if "\n\n**" in part else part.index("<!-- END")]
    every, required = set(), set()
    for r in _rows(part):
        names = re.findall(r"`([A-Za-z0-9_.{}]+)`", r[0])
        full = [names[0]] + [names[0].removesuffix("weight") + "bias" for n in names[1:] if n == ".bias"]
        every |= set(full)
        if r[2] in ("required", "bias optional"):  # not "optional", not "with <a flag>"
            required.add(full[0])
        if r[2] == "required":
            required |= set(full[1:])
    return every, required


def check_file_against_doc(keys: dict[str, Any], tensors: dict[str, np.ndarray], scopes: set[str], title: str,
                           prefixes: tuple[str, ...]) -> None:
    """The file's keys and its tensors under `prefixes` are documented; the documented required ones
    are in the file (tensors that exist only with some flag are left to the loader's tests)."""
    every_k, required_k = documented_keys(scopes)
    written_k = {k for k in keys if not k.startswith("GGUF.")}
    assert written_k - every_k == set()
    assert required_k - written_k == set()
    every_t, required_t = documented_tensors(title)
    written_t = {re.sub(r"(blk|hier_norm)\.\d+\.", r"\1.{i}.", n) for n in tensors if n.startswith(prefixes)}
    assert written_t - every_t == set()
    assert required_t - written_t == set()
