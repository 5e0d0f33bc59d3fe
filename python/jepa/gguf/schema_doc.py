"""docs/gguf.md's key and tensor tables, rendered from the declarations (tools/render_docs.py writes
them between its markers, and `--check` fails when the page is stale)."""

from __future__ import annotations

from typing import Any

from .keys import KEYS, Key
from .tensors import PARTS, Layers, Part, T

# What a tensor's `when` flags mean, for a reader of the file.
WHEN = {
    "cls_token": "`enc.cls_token`",
    "registers": "`enc.n_registers` > 0",
    "pos_table": "a position table (`enc.pos_type` `learned` or `sincos2d`)",
    "fused": "fused q/k/v",
    "separate": "separate q/k/v",
    "layer_scale": "`enc.layer_scale`",
    "qkv_bias": "the source has q/k/v biases",
    "image_patch_embed": "`enc.image_patch_embed`",
    "modality_embed": "`enc.modality_embed`",
    "final_norm": "no `enc.hier_layers`",
    "hier": "`enc.hier_layers`, {i} < its length",
    "one_level": "`pred.in_levels` 1",
    "levels": "`pred.in_levels` > 1",
    "pred_modality": "`pred.modality_embed`",
    "proj_context": "`pred.proj_context`",
}


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if isinstance(v, str):
        return f"`{v}`" if v else '`""`'
    if isinstance(v, tuple):
        return "[" + ", ".join(f"{x:g}" for x in v) + "]"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _need(k: Key) -> str:
    if not k.read:
        return "optional, not read"
    if k.required:
        return "**required**"
    return "default " + (k.absent if k.default is None else _value(k.default))


def _values(k: Key) -> str:
    parts = []
    if k.allowed is not None:
        parts.append(", ".join(_value(v) for v in k.allowed))
    if k.range is not None:
        parts.append(str(k.range))
    return "; ".join(parts)


def render_keys() -> str:
    rows = [
        [f"`{k.name}`", k.type.value, " / ".join(s.value for s in k.scope), _need(k), _values(k), k.meaning]
        for k in KEYS
    ]
    return "\n".join(_table(["key", "type", "in", "when absent", "values", "meaning"], rows)) + "\n"


def _shape(t: T, rename: dict[str, str]) -> str:
    return "[" + ", ".join("·".join(rename.get(f, f) for f in s.split("*")) for s in t.shape) + "]"


def _rows(part: Part) -> list[list[str]]:
    """One row per tensor, a Linear's or a LayerNorm's weight and bias on one row."""
    items: list[tuple[T, dict[str, str]]] = []
    for item in part.items:
        if isinstance(item, Layers):
            items += [(t, dict(item.rename)) for t in item.items if part.possible(t)]
        elif part.possible(item):
            items.append((item, {}))
    rows: list[list[str]] = []
    i = 0
    while i < len(items):
        t, rename = items[i]
        pair = (
            t.name.endswith(".weight")
            and i + 1 < len(items)
            and items[i + 1][0].name == t.name.removesuffix("weight") + "bias"
        )
        b = items[i + 1][0] if pair else None
        names = f"`{t.name}`" + (", `.bias`" if b else "")
        shape = _shape(t, rename) + (", " + _shape(b, rename) if b else "")
        notes = [] if t.required else ["optional"]
        if t.when:
            notes.append("with " + " and ".join(WHEN[f] for f in t.when.split()))
        if b is not None and not b.required:
            extra = [WHEN[f] for f in b.when.split() if f not in t.when.split()]
            notes.append("bias optional" + (" (written when " + " and ".join(extra) + ")" if extra else ""))
        rows.append([names, shape, "; ".join(notes) or "required", "yes" if t.half else "", t.meaning])
        i += 2 if b else 1
    return rows


def render_tensors() -> str:
    out: list[str] = []
    for part in PARTS:
        out += [f"**{part.title}**, in {part.when}. {part.symbols}.", ""]
        out += _table(["tensor", "ggml shape", "present", "16-bit", "meaning"], _rows(part))
        out.append("")
    return "\n".join(out)
