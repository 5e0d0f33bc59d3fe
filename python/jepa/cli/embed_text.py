"""jepa-embed for text models: `--text` strings and .txt / .jsonl files, through jepa.text (the code the
library and the server run), so a text's vector here is bit-identical to jepa.text.embed_text's and the
server's for the same text.

A .txt file gives one text per non-empty line (named file:LINE); a .jsonl file one per line, each a JSON
string or an object with a "text" field. Truncation to the model's max_seq_len is reported. A text file
is read whole, and only a regular file of at most MAX_TEXT_FILE_BYTES (opened non-blocking and fstat'ed
first: a FIFO, a device such as /dev/zero or a directory is refused before a byte is read)."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from typing import Any

import numpy as np

TEXT_EXTENSIONS = (".txt", ".jsonl")
# The most bytes one .txt / .jsonl file may hold: every text of a run is tokenized at once, and HF
# tokenizers holds some hundred bytes per character while it works (see jepa.text.TOKENIZE_CHARS).
MAX_TEXT_FILE_BYTES = 64 << 20


class BadText(Exception):
    """An input that names no text (a missing file, a malformed line)."""


def _read(path: str) -> str:
    """The file's text (UTF-8, newlines as open() reads them: \\r\\n and \\r become \\n), from a
    regular file of at most MAX_TEXT_FILE_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise BadText(f"{path}: no such file") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the name
        raise BadText(f"{path}: {e.strerror if isinstance(e, OSError) and e.strerror else e}") from None
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise BadText(f"{path}: a directory, not a text file")
        if not stat.S_ISREG(st.st_mode):
            raise BadText(f"{path}: not a regular file (a FIFO, a device or a socket)")
        limit = MAX_TEXT_FILE_BYTES
        data = f.read(limit + 1) if st.st_size <= limit else b""
        if st.st_size > limit or len(data) > limit:  # over it from fstat, or grown since
            raise BadText(f"{path}: {max(st.st_size, len(data))} bytes, over the limit of {limit} bytes "
                          f"({limit >> 20} MiB) a text file may hold")
    text = data.decode("utf-8")  # a UnicodeDecodeError is the caller's to name
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _lines(path: str) -> list[tuple[int, str]]:
    """(line number, line) for the file's non-empty lines, without the newline."""
    return [(n, line) for n, line in enumerate(_read(path).split("\n"), 1) if line.strip()]


def _jsonl(path: str) -> list[tuple[str, str]]:
    out = []
    for n, line in _lines(path):
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadText(f"{path}:{n}: not JSON ({e.msg})") from None
        if isinstance(value, dict):
            value = value.get("text")
        if not isinstance(value, str):
            raise BadText(f'{path}:{n}: expected a JSON string or an object with a "text" string')
        out.append((f"{path}:{n}", value))
    return out


def _txt(path: str) -> list[tuple[str, str]]:
    return [(f"{path}:{n}", line) for n, line in _lines(path)]


def text_entries(texts: list[str], inputs: list[str]) -> list[tuple[str, str]]:
    """(name, text) in command-line order: the --text strings, then each file's texts."""
    out = [(f"text[{i}]", t) for i, t in enumerate(texts)]
    for path in inputs:
        ext = os.path.splitext(path)[1].lower()
        if ext not in TEXT_EXTENSIONS:
            raise BadText(f"{path}: a text model reads .txt or .jsonl files (or --text strings)")
        try:
            out += _jsonl(path) if ext == ".jsonl" else _txt(path)
        except FileNotFoundError:
            raise BadText(f"{path}: no such file") from None
        except UnicodeDecodeError as e:  # e.object: the file's bytes
            line = e.object.count(b"\n", 0, e.start) + 1
            raise BadText(f"{path}:{line}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                          f"{e.start} of the file)") from None
        except OSError as e:
            raise BadText(f"{path}: {e.strerror or e}") from None
    return out


def run_text(args: argparse.Namespace, model: Any, write: Any) -> int:
    """Embed the texts (tokenizer.encode, then encode_tokens: what jepa.text.embed_text runs);
    `write(names, vectors)` writes the rows as jepa-embed does for images and returns the exit status."""
    from ..errors import JepaError
    from ..text import encode_tokens

    prog = "jepa-embed"
    if args.pool == "none":
        print(f"{prog}: error: --pool none is for image and video models", file=sys.stderr)
        return 2
    try:
        entries = text_entries(args.text or [], list(args.inputs))
    except BadText as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    if not entries:
        print(f"{prog}: error: no text to embed (give --text or .txt / .jsonl files)", file=sys.stderr)
        return 1
    ctx = model.context(threads=args.threads, max_batch=args.batch)
    try:
        seqs = model.tokenizer.encode([t for _, t in entries])
    except JepaError as e:
        print(f"{prog}: error: {_name_of(e, entries)}", file=sys.stderr)
        return 1
    try:
        vectors = encode_tokens(ctx, seqs, args.pool)
    except JepaError as e:
        print(f"{prog}: error: {e.message}", file=sys.stderr)
        return 1
    truncated = [name for (name, _), s in zip(entries, seqs, strict=True) if s.truncated]
    if truncated and not args.quiet:
        print(
            f"{prog}: {len(truncated)} text(s) truncated to {model.info.max_seq_len} tokens "
            f"(first: {truncated[0]})",
            file=sys.stderr,
        )
    return int(write([n for n, _ in entries], np.asarray(vectors, np.float32)))


def _name_of(e: Any, entries: list[tuple[str, str]]) -> str:
    """The library's refusal of text i (param 'input[i]') with the entry's own name in place of the
    param: "'input[3]' is an empty string" -> "notes.txt:4 is an empty string"."""
    param = getattr(e, "param", None) or ""
    index = param[len("input[") : -1] if param.startswith("input[") and param.endswith("]") else ""
    if index.isdigit() and int(index) < len(entries):
        return str(e.message).replace(f"'{param}'", entries[int(index)][0])
    return str(e.message)
