"""TOML text from a settings file (--config) or a models directory's models.toml, parsed with the
limits an operator's typo or a hostile file cannot get past: UTF-8 only, and nesting at most
MAX_TOML_DEPTH deep (tomllib parses arrays by recursion, so 500 nested arrays raised an uncaught
RecursionError and every request that rescanned the catalog answered 500)."""

from __future__ import annotations

import tomllib
from typing import Any

# Deeper than any settings or models file needs (they are tables of scalars and short lists).
MAX_TOML_DEPTH = 32


class TomlError(ValueError):
    """The text is not TOML this server reads; the message says why."""


def parse_toml(data: bytes) -> dict[str, Any]:
    """`data` as TOML, or TomlError naming why (not UTF-8, not TOML, nested too deeply)."""
    try:
        doc = tomllib.loads(data.decode("utf-8"))  # TOML is UTF-8 only
    except RecursionError:
        raise TomlError(f"arrays or tables are nested more than {MAX_TOML_DEPTH} deep") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TomlError(str(exc)) from None
    # What parsed may still be deep enough to exhaust a recursive consumer (a repr, a JSON answer):
    # walked here without recursion.
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_TOML_DEPTH:
            raise TomlError(f"arrays or tables are nested more than {MAX_TOML_DEPTH} deep")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return doc
