"""The converter interface and its registry (one small class per source layout, llama.cpp style)."""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .gguf_keys import recipe_conflict
from .gguf_writer import PartSpec, write_gguf
from .schema import Encoder, Meta, Preprocess
from .source import TensorSource


@dataclass(frozen=True)
class Options:
    """What the command line may add to or override in a checkpoint's own metadata."""

    name: str | None = None
    n_head: int | None = None
    license: str | None = None
    source_url: str | None = None
    description: str | None = None
    img_size: int | None = None  # native input size, for checkpoints whose shapes cannot tell it
    head_dim: int | None = None  # attention head width, where the head count is not recorded
    pooling: str | None = None  # text models: cls / mean / last_token, where the checkpoint does not say
    normalize: bool | None = None  # text models: L2-normalise the pooled vector (None: the checkpoint's)
    max_seq_len: int | None = None  # text models: the truncation length (None: the checkpoint's)


class Converter(ABC):
    """One source layout. Subclasses say which family they write, how to recognise their checkpoint,
    and map its hparams and tensors; checkpoint quirks live only in the subclass."""

    family: ClassVar[str]
    modality: ClassVar[str] = "image"  # what the model reads: image / video / text (jepa.modality)

    def __init__(self, src: Path, options: Options | None = None) -> None:
        self.src = src
        self.options = options or Options()
        self.source = self.open_source()

    @classmethod
    @abstractmethod
    def detect(cls, src: Path) -> bool:
        """Whether `src` looks like this converter's layout (for --family auto)."""

    @abstractmethod
    def open_source(self) -> TensorSource: ...

    @abstractmethod
    def hparams(self) -> Encoder: ...

    @abstractmethod
    def preprocess(self) -> Preprocess: ...

    @abstractmethod
    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """(GGUF name, array in the GGUF's numpy shape) for every encoder tensor."""

    def meta(self) -> Meta:
        o = self.options
        return Meta(
            family=self.family,
            name=o.name or self.default_name(),
            description=o.description or "",
            license=o.license or readme_license(self.src) or "",
            source_url=o.source_url or "",
            modality=self.modality,
        )

    def default_name(self) -> str:
        return default_name(self.src)

    def checked_tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """tensors(), then an error naming every source tensor nothing mapped."""
        yield from self.tensors()
        left = self.source.unused()
        if left:
            raise ValueError(f"unmapped source tensor(s): {', '.join(left)}")

    def parts(self) -> list[PartSpec]:
        """What the file holds beyond the encoder (a predictor, a head)."""
        return []

    def convert(self, out: str | Path, ftype: str = "f32") -> str:
        """Write the file, refusing a recipe whose inputs the encoder refuses (a file that loads and
        then refuses every request)."""
        enc, pre = self.hparams(), self.preprocess()
        why = recipe_conflict(enc.keys() | pre.keys())
        if why:
            raise ValueError(f"{self.src}: {why}")
        return write_gguf(out, self.meta(), enc, pre, self.checked_tensors(), ftype, parts=self.parts())


REGISTRY: dict[str, type[Converter]] = {}


def register(cls: type[Converter]) -> type[Converter]:
    if cls.family in REGISTRY:
        raise RuntimeError(f"two converters for family {cls.family}")
    REGISTRY[cls.family] = cls
    return cls


def pick(src: Path, family: str = "auto") -> type[Converter]:
    if family != "auto":
        try:
            return REGISTRY[family]
        except KeyError:
            raise ValueError(f"unsupported family={family} (known: {', '.join(sorted(REGISTRY))})") from None
    found = [c for c in REGISTRY.values() if c.detect(src)]
    if len(found) != 1:
        what = "no converter" if not found else f"several converters ({', '.join(c.family for c in found)})"
        raise ValueError(f"{src}: {what} recognise this checkpoint; pass --family")
    return found[0]


def square(field: str, v: Any) -> int:
    """A size config.json may give as n or [n, n] (HF's patch_size, image_size)."""
    if isinstance(v, (list, tuple)):
        if len(v) != 2 or v[0] != v[1]:
            raise ValueError(f"unsupported {field}={v}")
        v = v[0]
    return int(v)


def resolve_n_head(found: int | None, flag: int | None, width: int, by_width: dict[int, int]) -> int:
    """The head count shapes cannot tell: config.json's, else --n-head (which must agree with a
    config), else the family's standard head count for the width."""
    if found and flag and flag != found:
        raise ValueError(f"unsupported n_head={flag}: config.json says {found}")
    n = found or flag or by_width.get(width)
    if not n:
        raise ValueError(f"unsupported embed_dim={width} without a head count: pass --n-head")
    return n


def read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def beside(src: Path, name: str) -> Path:
    """A file that ships next to the weights (src is the checkpoint directory or a weights file)."""
    return (src if src.is_dir() else src.parent) / name


# Folder names that say where a checkpoint lies, not what it is: the name is looked for further up.
_GENERIC_DIRS = {"model", "models", "snapshots", "checkpoint", "checkpoints", "weights"}


def _generic(name: str) -> bool:
    """A folder name that is no model's name: one of _GENERIC_DIRS, a hash (a Hub snapshot), none."""
    return name.lower() in _GENERIC_DIRS or bool(re.fullmatch(r"[0-9a-f]{7,64}", name)) or not name


def card_name(src: Path) -> str | None:
    """The model card's name: README.md's first `# heading` (outside the front matter and code
    blocks) when it is one word, as the Hub's cards title a model ("# all-MiniLM-L6-v2", "# Model Card
    for org/name"); a sentence ("# SentenceTransformer based on ...", which names the base model) is
    not a name."""
    readme = beside(src, "README.md")
    if not readme.is_file():
        return None
    text = readme.read_text(errors="replace")
    if text.startswith("---"):
        text = text[3:].split("\n---", 1)[-1]
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and line.startswith("# "):
            title = line[2:].strip().removeprefix("Model Card for ").strip().strip("`")
            return title.rsplit("/", 1)[-1] if title and not re.search(r"\s", title) else None
    return None


def default_name(src: Path) -> str:
    """general.name when --name is not given: the model card's (card_name), else the checkpoint
    folder's name, or the nearest ancestor's that is not generic (…/all-MiniLM-L6-v2/model, a Hub
    cache's models--org--name/snapshots/<hash>: name)."""
    found = card_name(src)
    if found:
        return found
    folder = (src if src.is_dir() else src.parent).resolve()
    for d in (folder, *folder.parents):
        if d.name.startswith("models--"):  # the Hub cache: models--{org}--{name}
            return d.name.rsplit("--", 1)[-1]
        if not _generic(d.name):
            return d.name
    return folder.name


def readme_license(src: Path) -> str | None:
    """`license:` from a model card's YAML front matter, as the HF Hub writes it."""
    readme = beside(src, "README.md")
    if not readme.is_file():
        return None
    text = readme.read_text(errors="replace")
    if not text.startswith("---"):
        return None
    front = text[3:].split("\n---", 1)[0]
    m = re.search(r"^license:\s*(\S.*?)\s*$", front, re.MULTILINE)
    return m.group(1).strip("'\"") if m else None
