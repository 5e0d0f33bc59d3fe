"""The tensors of a jepa GGUF file (schema v1), per part: one declaration that the writer checks
against, the random-weight writers and the demo model draw from, and docs/gguf.md renders. It agrees
with the C++ loader (csrc/src/model.cpp), which is the authority: tests/test_gguf_schema.py drops
every tensor of tiny files of every kind and checks the loader's answer.

Shapes are in ggml order (`ne[0]` first: PyTorch's last dimension), written with the part's symbols;
`Part.table(dims)` evaluates them and gives numpy shapes, the order a writer hands arrays over in."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    """What a tensor is; MATRIX is the only role the loader lets be 16-bit or quantized."""

    MATRIX = "Linear weight"
    EMBED = "patch embedding (f32)"
    GAIN = "LayerNorm gain"
    BIAS = "bias"
    TOKEN = "learned tokens or positions"
    SCALE = "layer scale"


@dataclass(frozen=True)
class T:
    name: str  # "{i}" stands for the layer index inside Layers
    shape: tuple[str, ...]  # ggml order: symbols, integers or products ("3*I")
    role: Role
    meaning: str = ""
    required: bool = True
    when: str = ""  # flags of the part's dims (space-separated): the tensor exists only where all are true
    # Stored in 16 bits by --ftype f16 / bf16. The loader takes any MATRIX in 16 bits; the converters
    # keep the small conditioning and projector matrices in f32, as every file so far has them.
    half: bool = False


@dataclass(frozen=True)
class Layers:
    """`items` once per layer, for `count` layers; `rename` maps the items' symbols to the part's."""

    count: str
    items: tuple[T, ...]
    rename: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Expected:
    shape: tuple[int, ...]  # numpy order; for enc.pos_embed the writers' choice of rows
    required: bool
    half: bool
    role: Role
    shapes: tuple[tuple[int, ...], ...] = ()  # every shape the loader accepts (default: (shape,))

    def accepts(self, shape: tuple[int, ...]) -> bool:
        return shape in (self.shapes or (self.shape,))


def _linear(
    prefix: str,
    n_in: str,
    n_out: str,
    meaning: str = "",
    *,
    half: bool = True,
    when: str = "",
    bias_when: str = "",
) -> tuple[T, T]:
    """A Linear layer: prefix.weight [in, out] and its optional bias [out] (TensorTable::linear)."""
    return (
        T(f"{prefix}.weight", (n_in, n_out), Role.MATRIX, meaning, when=when, half=half),
        T(f"{prefix}.bias", (n_out,), Role.BIAS, required=False, when=f"{when} {bias_when}".strip()),
    )


def _norm(prefix: str, d: str = "D", meaning: str = "") -> tuple[T, T]:
    """An affine LayerNorm: the loader requires gain and bias."""
    return T(f"{prefix}.weight", (d,), Role.GAIN, meaning), T(f"{prefix}.bias", (d,), Role.BIAS)


# One pre-norm block (csrc/src/model.cpp declare_block): D the block's width, F its MLP width, I its
# attention width (D but for LeWM).
BLOCK: tuple[T, ...] = (
    *_norm("ln1", meaning="before the attention"),
    *_linear("attn_qkv", "D", "3*I", "q; k; v rows, each head-major", when="fused", bias_when="qkv_bias"),
    *_linear("attn_q", "D", "I", when="separate", bias_when="qkv_bias"),
    *_linear("attn_k", "D", "I", when="separate", bias_when="qkv_bias"),
    *_linear("attn_v", "D", "I", when="separate", bias_when="qkv_bias"),
    *_linear("attn_out", "I", "D"),
    *_norm("ln2", meaning="before the MLP"),
    *_linear("ffn_up", "D", "F"),
    *_linear("ffn_down", "F", "D"),
)
LAYER_SCALE: tuple[T, ...] = (
    T("ls1.weight", ("D",), Role.SCALE, "layer scale of the attention branch", when="layer_scale"),
    T("ls2.weight", ("D",), Role.SCALE, "layer scale of the MLP branch", when="layer_scale"),
)


@dataclass(frozen=True)
class Part:
    """The tensors of one part of a file, in the order the writers hand them over."""

    title: str
    when: str  # which files hold the part (docs)
    symbols: str  # what the symbols mean (docs)
    items: tuple[T | Layers, ...]
    fixed: tuple[tuple[str, bool], ...] = ()  # flags the loader fixes for this part

    def possible(self, t: T) -> bool:
        """Whether a file's part can hold this template at all (docs leave the others out)."""
        fixed = dict(self.fixed)
        return all(fixed.get(f, True) for f in t.when.split())

    def templates(self) -> Iterator[tuple[str, T, dict[str, str]]]:
        """(name with {i}, template, symbol renames) for every tensor of the part (docs, name rules)."""
        for item in self.items:
            if isinstance(item, Layers):
                for t in item.items:
                    yield t.name, t, dict(item.rename)
            else:
                yield item.name, item, {}

    def table(self, dims: Mapping[str, int | bool]) -> dict[str, Expected]:
        dims = {**dims, **dict(self.fixed)}
        out: dict[str, Expected] = {}
        for item in self.items:
            if isinstance(item, Layers):
                inner = {**dims, **{a: dims[b] for a, b in item.rename}}
                for i in range(int(dims[item.count])):
                    for t in item.items:
                        _add(out, t, t.name.format(i=i), inner)
            else:
                _add(out, item, item.name, dims)
        return out


def _add(out: dict[str, Expected], t: T, name: str, dims: Mapping[str, int | bool]) -> None:
    if not all(dims[f] for f in t.when.split()):
        return
    alt: tuple[tuple[int, ...], ...] = ()
    if name == "enc.pos_embed":  # the loader accepts a table with or without the prefix-token rows
        alt = tuple((r, int(dims["D"])) for r in pos_rows(dims))
        shape = alt[0]
    else:
        shape = tuple(_eval(s, dims) for s in reversed(t.shape))
    out[name] = Expected(shape, t.required, t.half, t.role, alt)


def _eval(expr: str, dims: Mapping[str, int | bool]) -> int:
    return math.prod(int(f) if f.isdigit() else int(dims[f]) for f in expr.split("*"))


def pos_rows(dims: Mapping[str, int | bool]) -> tuple[int, ...]:
    """Rows enc.pos_embed may have (model.cpp declare_encoder), the writers' choice first: a CLS slot
    when there is a CLS token (HF's and timm's tables), else the patches alone; the loader also
    takes the patches alone beside a CLS, and a slot for every prefix token (CLS and registers)."""
    p, n_prefix = int(dims["n_patches"]), int(dims["cls_token"]) + int(dims["n_registers"])
    rows = [p + 1, p] if dims["cls_token"] else [p]
    if n_prefix > 1:
        rows.append(p + n_prefix)
    return tuple(rows)


def _block(prefix: str, before: tuple[T, ...] = (), after: tuple[T, ...] = ()) -> tuple[T, ...]:
    return tuple(
        T(f"{prefix}.{{i}}.{t.name}", t.shape, t.role, t.meaning, t.required, t.when, half=t.half)
        for t in (*before, *BLOCK, *after)
    )


ENCODER = Part(
    "Encoder",
    "every file",
    "D `enc.embed_dim`, F `enc.ffn_dim`, R `enc.n_registers`, K = in_chans x tubelet_size x patch_size²; "
    "N = the patches of the native grid (n_frames / tubelet_size x grid²), + 1 for a CLS slot, or + 1 + R",
    (
        T(
            "enc.patch_embed.weight",
            ("K", "D"),
            Role.EMBED,
            "the Conv2d / Conv3d kernel flattened in C, t, y, x order",
        ),
        T("enc.patch_embed.bias", ("D",), Role.BIAS, required=False),
        T("enc.cls_token", ("D",), Role.TOKEN, "the CLS token", when="cls_token"),
        T("enc.reg_tokens", ("D", "R"), Role.TOKEN, "register tokens (no position)", when="registers"),
        T("enc.pos_embed", ("D", "N"), Role.TOKEN, "the position table", when="pos_table"),
        T("enc.patch_embed_img.weight", ("K1", "D"), Role.EMBED,
          "the tubelet-1 Conv3d kernel a one-frame input takes (V-JEPA 2.1)", when="image_patch_embed"),
        T("enc.patch_embed_img.bias", ("D",), Role.BIAS, required=False, when="image_patch_embed"),
        T("enc.mod_embed_video", ("D",), Role.TOKEN, "added to every video patch token",
          when="modality_embed"),
        T("enc.mod_embed_img", ("D",), Role.TOKEN, "added to every image patch token",
          when="modality_embed image_patch_embed"),
        Layers("n_layer", _block("enc.blk", after=LAYER_SCALE), (("I", "D"),)),
        T("enc.norm.weight", ("D",), Role.GAIN, "the final LayerNorm", when="final_norm"),
        T("enc.norm.bias", ("D",), Role.BIAS, when="final_norm"),
        Layers("n_levels", (
            T("enc.hier_norm.{i}.weight", ("D",), Role.GAIN, "level {i}'s LayerNorm (V-JEPA 2.1)",
              when="hier"),
            T("enc.hier_norm.{i}.bias", ("D",), Role.BIAS, when="hier"),
        )),
    ),
)


PRED_RENAME = (("D", "Dp"), ("F", "Fp"), ("I", "Dp"))

HEAD = Part(
    "Attentive-pool head",
    "`jepa.head.kind` = `attentive_pool`",
    "D the encoder width, F the head's MLP width (read from `head.xattn.ffn_up`), C `head.n_classes`",
    (
        T("head.query", ("D", "1"), Role.TOKEN, "the learned query, used raw"),
        Layers("n_pool_layers", _block("head.blk"), (("I", "D"),)),
        *_norm("head.xattn.ln_kv", meaning="on the keys and values only"),
        *_linear("head.xattn.q", "D", "D"),
        *_linear("head.xattn.k", "D", "D"),
        *_linear("head.xattn.v", "D", "D"),
        *_norm("head.xattn.ln2"),
        *_linear("head.xattn.ffn_up", "D", "F"),
        *_linear("head.xattn.ffn_down", "F", "D"),
        *_linear("head.cls", "D", "C", "the classifier"),
    ),
)

MASKED = Part(
    "Masked predictor",
    "`jepa.pred.kind` = `masked` (V-JEPA 2, 2.1)",
    "D the encoder width, Dp `pred.embed_dim`, Fp `pred.ffn_dim`, M `pred.n_mask_tokens`, "
    "L `pred.in_levels`, W `pred.out_dim`",
    (
        *_linear("pred.embed", "D", "Dp", "context tokens -> predictor width", when="one_level"),
        *_linear("pred.embed.0", "L*D", "D", "the levels side by side -> D, then GELU (V-JEPA 2.1 g/G)",
                 when="levels"),
        *_linear("pred.embed.2", "D", "Dp", "-> predictor width", when="levels"),
        T("pred.mask_tokens", ("Dp", "M"), Role.TOKEN, "one is put at every target"),
        T("pred.mod_embed_video", ("Dp",), Role.TOKEN, "added to every token of a clip's call",
          when="pred_modality"),
        T("pred.mod_embed_img", ("Dp",), Role.TOKEN, "added to every token of an image's call",
          when="pred_modality"),
        Layers("n_layer", _block("pred.blk"), PRED_RENAME),
        *_norm("pred.norm", "Dp"),
        *_linear("pred.proj", "Dp", "W", "the target rows out (W: the encoder width but for V-JEPA 2.1)"),
        *_linear("pred.proj_context", "Dp", "W", "the context rows out (V-JEPA 2.1)", when="proj_context"),
    ),
)

AC = Part(
    "Action-conditioned predictor",
    "`jepa.pred.kind` = `ac` (V-JEPA 2-AC, family `vjepa2`)",
    "D the encoder width, Dp `pred.embed_dim`, Fp `pred.ffn_dim`, A `pred.action_dim`, S `pred.state_dim`",
    (
        *_linear("pred.embed", "D", "Dp", "`predictor_embed`: normalised latents -> predictor width"),
        *_linear(
            "pred.action_embed", "A", "Dp", "`action_encoder`: a frame's action -> its token", half=False
        ),
        *_linear("pred.state_embed", "S", "Dp", "`state_encoder`: a frame's state -> its token", half=False),
        Layers("n_layer", _block("pred.blk"), PRED_RENAME),
        *_norm("pred.norm", "Dp", "`predictor_norm`"),
        *_linear("pred.proj", "Dp", "D", "`predictor_proj`: back to the encoder width"),
    ),
)

LEWM = Part(
    "LeWM projector and predictor",
    "family `lewm` (`jepa.pred.kind` = `lewm`, `jepa.enc.proj_act` set)",
    "E the ViT width, D `pred.embed_dim` (the projector's output; E = D in LeWM), Ip = n_head x head_dim, "
    "Fp `pred.ffn_dim`, T `pred.n_frames`, A `pred.action_dim`; Hp, Hq, M the hidden widths of the "
    "projector, `pred_proj` and the action embedder (read from the tensors)",
    (
        *_linear("enc.proj.0", "E", "Hp", "projector Linear, its BatchNorm folded in", half=False),
        *_linear("enc.proj.2", "Hp", "D", "projector output Linear", half=False),
        T("pred.pos_embed", ("D", "T"), Role.TOKEN, "learned positions, row t for step t of the window"),
        Layers(
            "n_layer",
            _block(
                "pred.blk",
                _linear(
                    "adaln",
                    "D",
                    "6*D",
                    "`adaLN_modulation`: shift, scale, gate (attention), shift, scale, gate (MLP)",
                    half=False,
                ),
            ),
            (("F", "Fp"), ("I", "Ip")),
        ),
        *_norm("pred.norm", meaning="the final LayerNorm"),
        *_linear("pred.proj.0", "D", "Hq", "`pred_proj` Linear, its BatchNorm folded in", half=False),
        *_linear("pred.proj.2", "Hq", "D", "`pred_proj` output Linear", half=False),
        *_linear(
            "pred.action_embed.0",
            "A",
            "M",
            "the Embedder's Conv1d (k=1) folded into its first Linear",
            half=False,
        ),
        *_linear("pred.action_embed.2", "M", "D", "the Embedder's second Linear", half=False),
    ),
    fixed=(("fused", True), ("separate", False)),  # declare_pred_lewm: attn_qkv always
)

# A post-norm BERT layer (family bert, csrc/src/text.cpp): ln1 after the attention's residual, ln2
# after the MLP's.
TEXT_BLOCK: tuple[T, ...] = (
    *_linear("attn_q", "D", "D"),
    *_linear("attn_k", "D", "D"),
    *_linear("attn_v", "D", "D"),
    *_linear("attn_out", "D", "D"),
    *_norm("ln1", meaning="after the attention's residual (BertSelfOutput.LayerNorm)"),
    *_linear("ffn_up", "D", "F"),
    *_linear("ffn_down", "F", "D"),
    *_norm("ln2", meaning="after the MLP's residual (BertOutput.LayerNorm)"),
)

TEXT = Part(
    "Text encoder",
    "family `bert` (BertModel, XLMRobertaModel)",
    "D `enc.embed_dim`, F `enc.ffn_dim`, V the vocabulary, P the position table's rows, Tt the token "
    "types (all three read from the tensors)",
    (
        T("text.tok_embed", ("D", "V"), Role.TOKEN, "word embeddings, row = token id"),
        T("text.type_embed", ("D", "Tt"), Role.TOKEN, "token-type embeddings"),
        T("text.pos_embed", ("D", "P"), Role.TOKEN, "position embeddings, row = `pos_offset` + index"),
        *_norm("text.embed_norm", meaning="the embeddings' LayerNorm"),
        Layers("n_layer", tuple(
            T(f"text.blk.{{i}}.{t.name}", t.shape, t.role, t.meaning, t.required, t.when, half=t.half)
            for t in TEXT_BLOCK
        )),
    ),
)

PARTS = (ENCODER, HEAD, MASKED, AC, LEWM, TEXT)


def _half_names() -> re.Pattern[str]:
    names = {re.escape(n).replace(r"\{i\}", r"\d+") for p in PARTS for n, t, _ in p.templates() if t.half}
    return re.compile("^(" + "|".join(sorted(names)) + ")$")


_HALF = _half_names()


def may_be_half(name: str) -> bool:
    """Whether --ftype f16 / bf16 stores this tensor in 16 bits."""
    return _HALF.match(name) is not None
