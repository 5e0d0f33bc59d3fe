"""The converter interface and its registry (one small class per source layout, llama.cpp style)."""

from __future__ import annotations

import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..gguf.keys import recipe_conflict
from ..gguf.schema import Encoder, Meta, Preprocess
from ..gguf.writer import PartSpec, write_gguf
from .source import TensorSource, load_json


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
    pred_n_head: int | None = None  # a predictor's heads, where the checkpoint does not record them
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


# family -> its converters, one per source layout (levjepa: the timm image layout and the HF video one);
# detection decides between the layouts of one family, as between families.
REGISTRY: dict[str, list[type[Converter]]] = {}


def register(cls: type[Converter]) -> type[Converter]:
    layouts = REGISTRY.setdefault(cls.family, [])
    if any(c.__name__ == cls.__name__ for c in layouts):
        raise RuntimeError(f"two converters {cls.__name__} for family {cls.family}")
    layouts.append(cls)
    return cls


def _one(src: Path, found: list[type[Converter]], what: str) -> type[Converter]:
    if len(found) != 1:
        names = ", ".join(f"{c.__name__} ({c.family})" for c in found)
        which = "no converter" if not found else f"several converters ({names})"
        raise ValueError(f"{src}: {which} recognise{'s' if not found else ''} this checkpoint{what}")
    return found[0]


def pick(src: Path, family: str = "auto") -> type[Converter]:
    """The converter for `src`: the one that recognises it (family auto), or the family's own; a family
    of several layouts takes the one of them that recognises it."""
    if family == "auto":
        return _one(src, [c for layouts in REGISTRY.values() for c in layouts if c.detect(src)],
                    "; pass --family")
    try:
        layouts = REGISTRY[family]
    except KeyError:
        raise ValueError(f"unsupported family={family} (known: {', '.join(sorted(REGISTRY))})") from None
    if len(layouts) == 1:
        return layouts[0]
    names = ", ".join(c.__name__ for c in layouts)
    return _one(src, [c for c in layouts if c.detect(src)], f" among family {family}'s layouts ({names})")


def resolve_n_head(found: int | None, flag: int | None, width: int, by_width: dict[int, int],
                   option: str = "--n-head") -> int:
    """The head count shapes cannot tell: config.json's, else --n-head (which must agree with a
    config), else the family's standard head count for the width."""
    if found and flag and flag != found:
        name = option.lstrip("-").replace("-", "_")
        raise ValueError(f"unsupported {name}={flag}: config.json says {found}")
    n = found or flag or by_width.get(width)
    if not n:
        raise ValueError(f"unsupported embed_dim={width} without a head count: pass {option}")
    return n


_MISSING: Any = object()


def _show(v: Any) -> str:
    """A JSON value as the file spells it, cut short: null, "abc", [1, 2]."""
    text = json.dumps(v)
    return text if len(text) <= 60 else text[:57] + "..."


class Config(Mapping[str, Any]):
    """A JSON object a checkpoint ships (config.json, preprocessor_config.json, modules.json's entries,
    a section of one), read through typed accessors: every refusal is one ValueError naming the file
    and the key ("…/config.json: hidden_size must be an integer, got null"), never a KeyError or a
    TypeError from deep inside a converter. A key that is absent or null takes the default when one is
    given and is refused when not. As a Mapping it gives the raw values (for detection)."""

    def __init__(self, path: Path, data: Mapping[str, Any], where: str = "") -> None:
        self.path, self.where = path, where
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def error(self, key: str, what: str) -> ValueError:
        return ValueError(f"{self.path}: {self.where}{key} {what}")

    def _raw(self, key: str, default: Any, kind: str) -> tuple[Any, bool]:
        """(value, whether it is the default)."""
        v = self._data.get(key)
        if v is not None:
            return v, False
        if default is _MISSING:
            raise self.error(key, "is missing" if key not in self._data else f"must be {kind}, got null")
        return default, True

    def first_positive(self, *keys: str) -> int | None:
        """The first of `keys` that is set (not absent, not null), as a positive integer; None when none
        is (a checkpoint's config spells a size one of several ways)."""
        for k in keys:
            if self.get(k) is not None:
                return self.integer(k, lo=1)
        return None

    def integer(self, key: str, default: Any = _MISSING, *, lo: int = 0) -> int:
        """An integer of at least `lo` (1.0 is one; 1.5, true and "1" are not)."""
        v, dflt = self._raw(key, default, "an integer")
        if dflt:
            return int(v)
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
            raise self.error(key, f"must be an integer, got {_show(v)}")
        if v < lo:
            raise self.error(key, f"must be at least {lo}, got {_show(v)}")
        return int(v)

    def number(self, key: str, default: Any = _MISSING) -> float:
        v, dflt = self._raw(key, default, "a number")
        if dflt:
            return float(v)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.error(key, f"must be a number, got {_show(v)}")
        return float(v)

    def string(self, key: str, default: Any = _MISSING) -> str:
        v, dflt = self._raw(key, default, "a string")
        if not dflt and not isinstance(v, str):
            raise self.error(key, f"must be a string, got {_show(v)}")
        return str(v)

    def flag(self, key: str, default: Any = _MISSING) -> bool:
        v, dflt = self._raw(key, default, "true or false")
        if not dflt and not isinstance(v, bool):
            raise self.error(key, f"must be true or false, got {_show(v)}")
        return bool(v)

    def choice(self, key: str, known: Iterable[str], default: Any = _MISSING) -> str:
        """One of `known` (a string); another value is refused as unsupported, naming the known ones."""
        v, dflt = self._raw(key, default, "a string")
        known = tuple(known)
        if dflt:
            return str(v)
        if not isinstance(v, str) or v not in known:
            shown = v if isinstance(v, str) else _show(v)
            raise ValueError(f"{self.path}: unsupported {self.where}{key}={shown} "
                             f"(known: {', '.join(known)})")
        return v

    def square(self, key: str, default: Any = _MISSING) -> int:
        """A size given as n or [n, n] (HF's patch_size, image_size)."""
        v, dflt = self._raw(key, default, "an integer or [n, n]")
        if dflt:
            return int(v)
        if isinstance(v, list):
            if len(v) != 2 or v[0] != v[1]:
                raise ValueError(f"{self.path}: unsupported {self.where}{key}={_show(v)} (only square sizes)")
            return Config(self.path, {key: v[0]}, self.where).integer(key, lo=1)
        return self.integer(key, lo=1)

    def section(self, key: str, *, required: bool = False) -> Config:
        """The object under `key` (an empty one when absent and not required)."""
        v = self._data.get(key)
        if v is None:
            if required:
                raise self.error(key, "is missing")
            v = {}
        if not isinstance(v, dict):
            raise self.error(key, f"must be an object, got {_show(v)}")
        return Config(self.path, v, f"{self.where}{key}.")


def read_json(path: Path) -> Config | None:
    """The JSON object file at `path` as a Config, None when there is no such file."""
    if not path.is_file():
        return None
    data = load_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object (it holds {_show(data)})")
    return Config(path, data)


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
