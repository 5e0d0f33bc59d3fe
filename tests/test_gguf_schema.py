"""The GGUF schema's declaration (jepa.gguf.keys / tensors) agrees with the C++ loader,
the authority on what a file may hold: (a) the key strings the loader reads are the declared ones
(csrc/src/*.cpp read as text); (b) on tiny files of every family and kind, written by the writer,
dropping a required key or tensor is refused with ModelFileError naming it, dropping an optional one
is not, and a key's declared default is what the loader assumes when the key is absent."""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

import jepa
from jepa.convert import CONVERTER_FAMILIES
from jepa.convert.recipes import HF_VIT_RECIPE, IMAGENET_RECIPE
from jepa.gguf import keys as gguf_keys
from jepa.gguf import tensors as gguf_tensors
from jepa.gguf.schema import Encoder, Meta
from jepa.gguf.writer import write_gguf
from jepa.testing.random_weights import random_tensors

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "csrc" / "src"


# -- (a) the key strings -----------------------------------------------------------------------


def loader_keys() -> set[str]:
    """Every jepa.* / general.* key the loader reads: the full literals, and the RoPE keys it builds
    as a prefix literal + a suffix literal (parse_rope(m, "jepa.enc.", ...) with prefix + "rope_theta")."""
    text = "\n".join(p.read_text() for p in sorted(SRC.glob("*.cpp")))
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#include"))
    literals = set(re.findall(r'"((?:jepa|general)\.[a-z0-9_.]+)"', text))
    prefixes = {s for s in literals if s.endswith(".")}
    suffixes = set(re.findall(r'prefix \+ "([a-z0-9_]+)"', text))
    return (literals - prefixes) | {p + s for p in prefixes for s in suffixes}


def test_loader_reads_exactly_the_declared_keys() -> None:
    read = {k.name for k in gguf_keys.KEYS if k.read}
    assert loader_keys() == read
    # A key declared as not read really is not: the declaration's `read=False` stays true.
    unread = {k.name for k in gguf_keys.KEYS} - read
    assert unread and not unread & loader_keys()


def test_the_parse_finds_the_rope_keys() -> None:
    # The guard's own check: the prefix + suffix keys are found (else (a) would pass vacuously for them).
    assert {"jepa.enc.rope_theta", "jepa.pred.rope_freq_layout"} <= loader_keys()


def _cpp_list(name: str) -> tuple[str, ...]:
    text = (SRC / "hparams.cpp").read_text()
    m = re.search(rf"{name}\s*=\s*\{{([^}}]*)\}}", text)
    assert m, name
    return tuple(re.findall(r'"([^"]+)"', m[1]))


def test_family_lists_agree() -> None:
    assert _cpp_list("kFamilies") == gguf_keys.KNOWN_FAMILIES
    assert set(_cpp_list("kSupportedFamilies")) == set(gguf_keys.FAMILIES)
    from jepa.convert.base import REGISTRY
    from jepa.convert.cli import _parser

    # Importing registers the converters.
    for module in ("bert", "hf_vit", "levjepa_hf", "lewm", "timm_vit", "vjepa2", "vjepa2_1", "vjepa2_ac"):
        importlib.import_module(f"jepa.convert.{module}")
    assert set(REGISTRY) == set(CONVERTER_FAMILIES)
    family = next(a for a in _parser()._actions if a.dest == "family")
    assert tuple(family.choices or ()) == ("auto", *CONVERTER_FAMILIES)


# -- (b) tiny files of every family and kind ---------------------------------------------------


def _encoder_only(family: str, recipe: Any, **enc: Any) -> Callable[[Path], str]:
    """A writer of an encoder-only file of `family` straight through write_gguf."""
    e = Encoder(embed_dim=16, n_layer=1, n_head=2, ffn_dim=32, patch_size=4, img_size=8, **enc)
    meta = Meta(family=family, name="t")
    return lambda path: write_gguf(path, meta, e, recipe, random_tensors(e.table(), 0))


def _writer(where: str, **kwargs: Any) -> Callable[[Path], str]:
    """module:function, called with the file's path and these sizes."""
    module, name = where.split(":")
    return lambda path: getattr(importlib.import_module(module), name)(path, **kwargs)


# One tiny file of every family and kind, each from the writer its tests and tools use.
FILES: dict[str, Callable[[Path], str]] = {
    "hfvit": _writer("jepa.demo:write_demo_model", embed_dim=16, n_layer=1, n_head=2, patch_size=4,
                     img_size=8),
    "ijepa": _encoder_only("ijepa", HF_VIT_RECIPE, cls_token=False),
    "levjepa": _encoder_only("levjepa", IMAGENET_RECIPE, n_registers=2, qkv_fused=True, layer_scale=True),
    "levjepa_video": _writer("jepa.testing.random_levjepa:write_random_levjepa", embed_dim=24, n_layer=1,
                             n_head=2, img_size=16, patch_size=8, n_frames=2),
    "vjepa2": _writer("jepa.testing.random_vjepa2:write_random_vjepa2", embed_dim=24, n_layer=1, n_head=2,
                      img_size=16, patch_size=8, n_frames=2,
                      predictor={"embed_dim": 24, "n_layer": 1, "n_head": 2}, head={"n_classes": 3}),
    "vjepa2_1": _writer("jepa.testing.random_vjepa2_1:write_random_vjepa2_1", embed_dim=24, n_head=2,
                        img_size=16, patch_size=8, n_frames=2,
                        predictor={"embed_dim": 24, "n_layer": 1, "n_head": 2, "in_levels": 4}),
    "ac": _writer("jepa.testing.random_world:write_random_ac", embed_dim=24, n_layer=1, n_head=2, enc_dim=24,
                  enc_heads=2, img_size=16, patch_size=8, n_frames=4),
    "lewm": _writer("jepa.testing.random_world:write_random_lewm", enc_dim=16, enc_layers=1, enc_heads=2,
                    patch_size=4, img_size=8, embed_dim=16, n_layer=1, n_head=2, head_dim=8, ffn_dim=32,
                    proj_hidden=32),
    "bert": _writer("jepa.testing.random_text:write_random_bert", embed_dim=16, n_layer=1, n_head=2,
                    ffn_dim=32, n_positions=10, max_seq_len=8),
}


def _read(path: str) -> tuple[dict[str, Any], list[Any], gguf.GGUFReader]:
    r = gguf.GGUFReader(path)
    keys = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    return keys, list(r.tensors), r


def _rewrite(
    src: str, dst: Path, *, drop_key: str = "", set_key: tuple[str, Any] | None = None, drop_tensor: str = ""
) -> str:
    """A copy of the file without one key or tensor, or with one key set to a value written with its
    declared type (gguf-py alone, none of the writer's checks)."""
    keys, tensors, r = _read(src)
    declared = gguf_keys.keys_for(gguf_keys.scopes_of(keys))
    if set_key is not None:
        keys[set_key[0]] = set_key[1]
    w = gguf.GGUFWriter(str(dst), "jepa")
    del w.kv_data[0]["general.architecture"]  # copied below like every other key (or dropped)
    for name, val in keys.items():
        if name == drop_key:
            continue
        if set_key is not None and name == set_key[0]:
            vtype, sub = _TYPES[declared[name][0].type]
        else:
            types = r.fields[name].types
            vtype, sub = types[0], (types[-1] if types[0] == gguf.GGUFValueType.ARRAY else None)
        w.add_key_value(name, val, vtype, sub)
    for t in tensors:
        if t.name != drop_tensor:
            shape = tuple(int(x) for x in reversed(t.shape))  # numpy order
            data = np.ascontiguousarray(t.data).view(np.uint8).reshape(*shape[:-1], -1)
            w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(dst)


_TYPES = {
    gguf_keys.GType.U32: (gguf.GGUFValueType.UINT32, None),
    gguf_keys.GType.F32: (gguf.GGUFValueType.FLOAT32, None),
    gguf_keys.GType.BOOL: (gguf.GGUFValueType.BOOL, None),
    gguf_keys.GType.STR: (gguf.GGUFValueType.STRING, None),
    gguf_keys.GType.F32_3: (gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.FLOAT32),
    gguf_keys.GType.STRS: (gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING),
}


def _load(path: str) -> tuple[str, Any]:
    """("ok", the model's info as text) or ("error", the refusal's class and message)."""
    try:
        m = jepa.Model(path)
    except jepa.JepaError as e:
        return "error", (type(e).__name__, str(e))
    return "ok", _fields(m.info)


def _fields(v: Any) -> Any:
    """Every field of the model's info, nested objects and enums included, as plain values."""
    if isinstance(v, dict):
        return {k: _fields(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_fields(x) for x in v]
    if isinstance(v, int | float | str | bool | type(None)):
        return v
    names = [n for n in dir(v) if not n.startswith("_") and not callable(getattr(v, n))]
    if not names or (hasattr(v, "name") and hasattr(v, "value")):  # an enum member
        return repr(v)
    return {n: _fields(getattr(v, n)) for n in names}


@pytest.fixture(scope="module", params=list(FILES))
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    path = FILES[request.param](tmp_path_factory.mktemp(request.param) / "m.gguf")
    assert _load(path)[0] == "ok"
    return request.param, path


def test_every_required_key_is_required(tiny: tuple[str, str], tmp_path: Path) -> None:
    kind, path = tiny
    keys, _, _ = _read(path)
    declared = gguf_keys.keys_for(gguf_keys.scopes_of(keys))
    required = [n for n, ks in declared.items() if any(k.required for k in ks)]
    assert required
    for name in required:
        assert name in keys, f"{kind}: the writer left out {name}"
        status, what = _load(_rewrite(path, tmp_path / "x.gguf", drop_key=name))
        assert status == "error" and what[0] == "ModelFileError" and name in what[1], (kind, name, what)


def test_every_optional_key_has_its_declared_default(tiny: tuple[str, str], tmp_path: Path) -> None:
    """Without the key the file loads as it does with the key set to the declared default (or fails
    alike); it never fails for the key's absence. A key the engine does not read changes nothing."""
    kind, path = tiny
    keys, _, _ = _read(path)
    declared = gguf_keys.keys_for(gguf_keys.scopes_of(keys))
    base = _load(path)
    for name, ks in declared.items():
        if name not in keys or any(k.required for k in ks):
            continue
        without = _load(_rewrite(path, tmp_path / "x.gguf", drop_key=name))
        assert not (without[0] == "error" and f"missing metadata key {name}" in without[1][1]), (kind, name)
        if all(not k.read for k in ks):
            assert without == base, (kind, name)
        elif ks[0].default is not None:
            default = ks[0].default
            with_default = _load(
                _rewrite(
                    path,
                    tmp_path / "y.gguf",
                    set_key=(name, list(default) if isinstance(default, tuple) else default),
                )
            )
            assert without == with_default, (kind, name)


def test_every_tensor_is_required_or_optional_as_declared(tiny: tuple[str, str], tmp_path: Path) -> None:
    kind, path = tiny
    _, tensors, _ = _read(path)
    optional = _declared_optional({t.name for t in tensors})
    for t in tensors:
        status, what = _load(_rewrite(path, tmp_path / "x.gguf", drop_tensor=t.name))
        if t.name in optional:
            assert status == "ok", (kind, t.name, what)
        else:
            # Predictor and head blocks are fused when the file holds attn_qkv: without it the loader
            # asks for the separate matrices instead (LeWM's blocks are always fused).
            named = t.name
            if kind != "lewm" and re.match(r"(pred|head)\.blk\.\d+\.attn_qkv\.weight$", t.name):
                named = t.name.replace("attn_qkv", "attn_q")
            assert status == "error" and what[0] == "ModelFileError" and named in what[1], (
                kind,
                t.name,
                what,
            )


def _declared_optional(names: set[str]) -> set[str]:
    """The names among `names` that some part declares optional (templates matched with {i} -> digits)."""
    out = set()
    for part in gguf_tensors.PARTS:
        for template, t, _ in part.templates():
            if not t.required:
                rx = re.compile("^" + re.escape(template).replace(r"\{i\}", r"\d+") + "$")
                out |= {n for n in names if rx.match(n)}
    return out


def test_the_writer_refuses_what_the_loader_refuses(tmp_path: Path) -> None:
    enc = Encoder(embed_dim=16, n_layer=1, n_head=2, ffn_dim=32, patch_size=4, img_size=8, cls_token=False)
    tensors = dict(random_tensors(enc.table(), 0))

    class Part:  # an ac predictor part without its required state width
        def keys(self) -> dict[str, Any]:
            return {
                "jepa.pred.kind": "ac",
                "jepa.pred.embed_dim": 16,
                "jepa.pred.n_layer": 1,
                "jepa.pred.n_head": 2,
                "jepa.pred.ffn_dim": 32,
                "jepa.pred.action_dim": 7,
            }

        def table(self) -> dict[str, gguf_tensors.Expected]:
            return {}

    meta = Meta(family="ijepa", name="t")
    with pytest.raises(ValueError, match=r"missing metadata key\(s\): jepa\.pred\.state_dim"):
        write_gguf(tmp_path / "a.gguf", meta, enc, HF_VIT_RECIPE, tensors.items(), parts=[Part()])
    with pytest.raises(ValueError, match=r"jepa\.pred\.n_mask_tokens: not a key of this file"):
        write_gguf(
            tmp_path / "a.gguf",
            meta,
            enc,
            HF_VIT_RECIPE,
            tensors.items(),
            parts=[
                type("P", (), {"keys": lambda s: {"jepa.pred.n_mask_tokens": 2}, "table": lambda s: {}})()
            ],
        )
    del tensors["enc.blk.0.ln1.bias"]  # a LayerNorm bias: the loader requires it
    with pytest.raises(ValueError, match=r"missing tensor\(s\): enc\.blk\.0\.ln1\.bias"):
        write_gguf(tmp_path / "a.gguf", meta, enc, HF_VIT_RECIPE, tensors.items())
    assert list(tmp_path.iterdir()) == []


def test_every_float_range_is_the_loaders(tiny: tuple[str, str], tmp_path: Path) -> None:
    """A float key set just outside its declared range (an open end itself, a closed one past it, and
    NaN) is refused by the loader naming the key: the declaration and the loader agree (issue 36, L19:
    jepa.pre.rescale <= 0 loaded, then a V-JEPA 2.1 request divided by zero and answered 500)."""
    kind, path = tiny
    keys, _, _ = _read(path)
    declared = gguf_keys.keys_for(gguf_keys.scopes_of(keys))
    checked = 0
    for name, ks in declared.items():
        k = ks[0]
        if k.type not in (gguf_keys.GType.F32, gguf_keys.GType.F32_3) or k.range is None or not k.read:
            continue
        outside = [math.nan]
        if k.range.lo is not None:
            outside.append(k.range.lo if k.range.open else k.range.lo - 1.0)
        if k.range.hi is not None:
            outside.append(k.range.hi if k.range.open else k.range.hi + 1.0)
        for v in outside:
            value: Any = [v, v, v] if k.type == gguf_keys.GType.F32_3 else v
            status, what = _load(_rewrite(path, tmp_path / "r.gguf", set_key=(name, value)))
            refused = status == "error" and what[0] == "ModelFileError" and name in what[1]
            assert refused, (kind, name, v, what)
            checked += 1
    if "jepa.pre.rescale" in declared:  # every vision file: NaN and 0 at least
        assert checked >= 2, kind
