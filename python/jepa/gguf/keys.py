"""The metadata keys of a jepa GGUF file (schema v1): one declaration that the writer validates
against, docs/gguf.md renders (tools/render_docs.py) and tests/test_gguf_schema.py holds to the C++
loader (csrc/src/hparams.cpp), which is the authority on what a file may hold.

A key may be declared more than once, for different scopes, where the loader reads it differently
(jepa.pred.action_dim: up to 1024 for an ac predictor, 65536 for lewm). `allowed` lists the values
this build runs; the loader refuses every other value, as a bad file or as unsupported."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class GType(StrEnum):
    """The GGUF type the writer uses (the loader also takes any integer type for u32, f64 for f32
    and 0 / 1 for bool)."""

    U32 = "u32"
    F32 = "f32"
    BOOL = "bool"
    STR = "str"
    F32_3 = "f32[3]"
    STRS = "[str]"
    U32S = "[u32]"


class Scope(StrEnum):
    """Which files a key belongs to."""

    ALL = "every file"
    VISION = "image and video files"
    TEXT = "family bert"
    ROPE = "rope3d encoder"
    HEAD = "attentive_pool head"
    PRED = "every predictor"
    MASKED = "masked predictor"
    AC = "ac predictor"
    LEWM = "lewm predictor"
    LEWM_FAMILY = "family lewm"
    VJEPA2_1 = "family vjepa2_1"


# The loader's family list (kFamilies) and the families this build runs (kSupportedFamilies).
KNOWN_FAMILIES = ("ijepa", "vjepa", "vjepa2", "vjepa2_1", "levjepa", "hfvit", "lewm", "bert")
FAMILIES = ("hfvit", "ijepa", "levjepa", "vjepa2", "vjepa2_1", "lewm", "bert")
TEXT_FAMILIES = ("bert",)  # modality text: token ids in, no jepa.pre.* / patch keys
POOLINGS = ("cls", "mean", "last_token")
ACTS = ("gelu_erf", "gelu_tanh", "silu")
PRED_KINDS = {"masked": Scope.MASKED, "ac": Scope.AC, "lewm": Scope.LEWM}
# general.file_type: what a file's weight matrices mostly hold, numbered as llama.cpp's LLAMA_FTYPE_*
# (gguf-py's LlamaFileType) number them. The one table of these names: the writer, jepa-quantize,
# the server's catalog and docs/gguf.md read it. A k-quant has llama.cpp's number for the name its
# tools give it (q4_k is Q4_K_M, 15; q5_k is Q5_K_M, 17); bf16 is 32 (30 is bf16's *tensor* type).
# i8c is the project's own (int8 per output channel, docs/gguf.md): 1000 and on never meet llama.cpp's.
FILE_TYPES: dict[str, int] = {
    "f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9,
    "q4_k": 15, "q5_k": 17, "q6_k": 18, "bf16": 32, "i8c": 1000,
}
FILE_TYPE_NAMES = {n: name for name, n in FILE_TYPES.items()}


@dataclass(frozen=True)
class Range:
    lo: float | None = None
    hi: float | None = None
    open: bool = False  # both ends excluded (floats)

    def __contains__(self, v: object) -> bool:
        if not isinstance(v, int | float):
            return False
        if self.open:
            return (self.lo is None or v > self.lo) and (self.hi is None or v < self.hi)
        return (self.lo is None or v >= self.lo) and (self.hi is None or v <= self.hi)

    def __str__(self) -> str:
        if self.hi is None:
            return f"> {self.lo:g}" if self.open else f">= {self.lo:g}"
        lo, hi = ("(", ")") if self.open else ("[", "]")
        return f"{lo}{self.lo:g}, {self.hi:g}{hi}"


@dataclass(frozen=True)
class Key:
    name: str
    type: GType
    scope: tuple[Scope, ...]
    meaning: str
    required: bool = False
    default: Any = None  # the loader's value when the key is absent (None: see `absent`)
    absent: str = ""  # what an absent key means when the default is not a plain value
    range: Range | None = None  # numbers; for f32[3], every element
    allowed: tuple[Any, ...] | None = None
    read: bool = True  # False: written for people and tools; the engine does not read it

    def check(self, value: Any) -> None:
        """Raise ValueError naming the key when `value` is not one this key may hold."""
        if not _has_type(self.type, value):
            raise ValueError(f"metadata key {self.name}: expected {self.type}, got {value!r}")
        items = value if self.type in (GType.F32_3, GType.U32S) else (value,)
        if self.range is not None and self.type != GType.STRS and any(v not in self.range for v in items):
            raise ValueError(f"metadata key {self.name}: value {value!r} out of range {self.range}")
        if self.allowed is not None and value not in self.allowed:
            allowed = ", ".join(map(str, self.allowed))
            raise ValueError(
                f"metadata key {self.name}: unsupported value {value!r} (expected one of: {allowed})"
            )


def _has_type(t: GType, v: Any) -> bool:
    if t == GType.BOOL:
        return isinstance(v, bool)
    if t == GType.U32:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32
    if t == GType.F32:
        return isinstance(v, int | float) and not isinstance(v, bool)
    if t == GType.STR:
        return isinstance(v, str)
    if t == GType.F32_3:
        return isinstance(v, list | tuple) and len(v) == 3 and all(_has_type(GType.F32, x) for x in v)
    if t == GType.U32S:
        return isinstance(v, list | tuple) and len(v) > 0 and all(_has_type(GType.U32, x) for x in v)
    return isinstance(v, list | tuple) and all(isinstance(x, str) for x in v)


U32, F32, BOOL, STR = GType.U32, GType.F32, GType.BOOL, GType.STR
ALL, ROPE, HEAD, PRED = (Scope.ALL,), (Scope.ROPE,), (Scope.HEAD,), (Scope.PRED,)
VISION, TEXT = (Scope.VISION,), (Scope.TEXT,)
MASKED, AC, LEWM = (Scope.MASKED,), (Scope.AC,), (Scope.LEWM,)
ROPE_PRED = (Scope.MASKED, Scope.AC)
EPS = Range(0, 1, open=True)


def _rope(prefix: str, scope: tuple[Scope, ...], interpolate: bool) -> tuple[Key, ...]:
    keys = (
        Key(
            f"{prefix}rope_freq_layout",
            STR,
            scope,
            "which frequency a rotated pair (2i, 2i+1) takes: `tiled`, V-JEPA 2's (omega[j mod d/2] per "
            "element), or `interleaved`, V-JEPA 2.1's (omega[i] for the pair)",
            default="tiled",
            allowed=("tiled", "interleaved"),
        ),
        Key(
            f"{prefix}rope_interpolate",
            BOOL,
            scope,
            "rows and columns scaled onto `rope_ref_grid`: h (ref - 1) / (Hp - 1) (V-JEPA 2.1's encoder)"
            if interpolate
            else "RoPE grid interpolation (refused for predictors)",
            default=False,
            allowed=(False, True) if interpolate else (False,),
        ),
        Key(f"{prefix}rope_theta", F32, scope, "the RoPE base", default=10000.0, range=Range(1, open=True)),
    )
    if not interpolate:
        return keys
    return (
        *keys,
        Key(
            f"{prefix}rope_ref_grid",
            U32,
            scope,
            "the pretraining grid interpolation scales onto (16 for patch 16 at 256 px)",
            absent="required when `rope_interpolate`",
            range=Range(2, 1024),
        ),
    )


# Data, one Key per metadata key and scope, every field named: the rows share a shape on purpose
# (`duplicates` pairs them). The writer, docs/gguf.md and the schema test read them.
KEYS: tuple[Key, ...] = (
    # -- what the file is ----------------------------------------------------------------------
    Key(
        "general.architecture", STR, ALL, "written by gguf-py's GGUFWriter", required=True, allowed=("jepa",)
    ),
    Key("general.name", STR, ALL, "the model's name", default=""),
    Key("general.description", STR, ALL, "provenance, written when known", read=False),
    Key("general.license", STR, ALL, "provenance (the model card's license)", read=False),
    Key("general.source_url", STR, ALL, "provenance", read=False),
    Key(
        "general.file_type",
        U32,
        ALL,
        "what the 2-D matrices mostly hold (llama.cpp's LLAMA_FTYPE_*): "
        + ", ".join(f"{n} {name}" for name, n in FILE_TYPES.items()),
        default=0,
        range=Range(0, 1024),
    ),
    Key("jepa.schema_version", U32, ALL, "this build reads version 1", required=True, allowed=(1,)),
    Key(
        "jepa.family",
        STR,
        ALL,
        "the model family (the loader also knows `vjepa` and refuses it as unsupported)",
        required=True,
        allowed=FAMILIES,
    ),
    Key(
        "jepa.modality",
        STR,
        ALL,
        "`image` or `video`: what the pipelines feed the encoder; `text` for family bert (and only there)",
        default="image",
    ),
    # -- the encoder ---------------------------------------------------------------------------
    Key("jepa.enc.embed_dim", U32, ALL, "D, the encoder width", required=True, range=Range(1, 16384)),
    Key("jepa.enc.n_layer", U32, ALL, "blocks", required=True, range=Range(1, 256)),
    Key("jepa.enc.n_head", U32, ALL, "attention heads (D is a multiple)", required=True, range=Range(1, 256)),
    Key("jepa.enc.ffn_dim", U32, ALL, "F, the MLP width", required=True, range=Range(1, 65536)),
    Key(
        "jepa.enc.patch_size", U32, VISION, "P, the patch side in pixels", required=True, range=Range(1, 64)
    ),
    Key(
        "jepa.enc.tubelet_size", U32, VISION, "frames per patch (2 for V-JEPA 2)",
        default=1, range=Range(1, 8),
    ),
    Key(
        "jepa.enc.img_size",
        U32,
        VISION,
        "the native input side, a multiple of P",
        required=True,
        range=Range(1, 8192),
    ),
    Key("jepa.enc.n_frames", U32, VISION, "native frames per clip", default=1, range=Range(1, 1024)),
    Key("jepa.enc.in_chans", U32, VISION, "input channels", default=3, range=Range(1, 16)),
    Key("jepa.enc.n_registers", U32, VISION, "register tokens after CLS", default=0, range=Range(0, 64)),
    Key("jepa.enc.cls_token", BOOL, VISION, "a CLS token first", default=False),
    Key(
        "jepa.enc.qkv_fused",
        BOOL,
        VISION,
        "one `attn_qkv` matrix per block instead of `attn_q`, `attn_k`, `attn_v`",
        default=False,
    ),
    Key("jepa.enc.layer_scale", BOOL, VISION, "per-block layer scales `ls1`, `ls2`", default=False),
    Key(
        "jepa.enc.ln_eps",
        F32,
        ALL,
        "LayerNorm epsilon (1e-12 HF ViT, 1e-6 timm and V-JEPA 2)",
        default=1e-6,
        range=EPS,
    ),
    Key(
        "jepa.enc.act",
        STR,
        ALL,
        "the MLP's GELU, exact or tanh (`silu` is refused for encoders)",
        default="gelu_erf",
        allowed=("gelu_erf", "gelu_tanh"),
    ),
    Key(
        "jepa.enc.pos_type",
        STR,
        VISION,
        "`learned` or `sincos2d`: a stored `enc.pos_embed` table (I-JEPA's "
        "fixed sincos table too); `rope3d`: V-JEPA 2's rotary positions; `none` (`sincos3d` is refused)",
        default="learned",
        allowed=("none", "learned", "sincos2d", "rope3d"),
    ),
    Key(
        "jepa.enc.attn_mode",
        STR,
        VISION,
        "`full`, or `block_causal` (LeVJEPA): a patch token attends the patches of its own frame and "
        "earlier ones and no prefix token, a CLS token every token",
        default="full",
        allowed=("full", "block_causal"),
    ),
    Key(
        "jepa.enc.proj_act",
        STR,
        VISION,
        "a projector after the CLS token: `enc.proj.0` -> act -> `enc.proj.2` (LeWM)",
        absent="no projector",
        allowed=ACTS,
    ),
    Key(
        "jepa.enc.proj_act",
        STR,
        (Scope.LEWM_FAMILY,),
        "a lewm predictor reads the projected CLS",
        required=True,
        allowed=ACTS,
    ),
    *_rope("jepa.enc.", ROPE, interpolate=True),
    Key(
        "jepa.enc.modality_embed",
        BOOL,
        VISION,
        "`enc.mod_embed_video` (and `enc.mod_embed_img` with `image_patch_embed`) added to every patch "
        "token after the embedding (V-JEPA 2.1)",
        default=False,
    ),
    Key(
        "jepa.enc.image_patch_embed",
        BOOL,
        VISION,
        "`enc.patch_embed_img`, a tubelet-1 embedding a one-frame input goes through (V-JEPA 2.1)",
        default=False,
    ),
    Key(
        "jepa.enc.hier_layers",
        GType.U32S,
        VISION,
        "the blocks after which a level's norm `enc.hier_norm.{k}` reads the residual stream, ascending, "
        "the last the final block: its level is the output and there is no `enc.norm` (V-JEPA 2.1)",
        absent="one final `enc.norm`",
        range=Range(0, 255),
    ),
    Key(
        "jepa.enc.hier_layers",
        GType.U32S,
        (Scope.VJEPA2_1,),
        "V-JEPA 2.1's four levels",
        required=True,
    ),
    Key(
        "jepa.enc.rope_interpolate",
        BOOL,
        (Scope.VJEPA2_1,),
        "V-JEPA 2.1's encoder interpolates",
        required=True,
        allowed=(True,),
    ),
    Key(
        "jepa.enc.rope_ref_grid",
        U32,
        (Scope.VJEPA2_1,),
        "V-JEPA 2.1's pretraining grid",
        required=True,
        range=Range(2, 1024),
    ),
    # -- text encoders (family bert) -------------------------------------------------------------
    Key(
        "jepa.text.pooling",
        STR,
        TEXT,
        "how a sequence's tokens become one vector: the first token's, their mean, or the last one's "
        "(never assumed: the wrong pooling gives plausible, useless vectors)",
        required=True,
        allowed=POOLINGS,
    ),
    Key("jepa.text.normalize", BOOL, TEXT,
        "L2-normalise the pooled vector (sentence-transformers' Normalize)",
        default=False),
    Key(
        "jepa.text.max_seq_len",
        U32,
        TEXT,
        "tokens per sequence after truncation, special tokens included (at most the position table's rows "
        "past `pos_offset`)",
        required=True,
        range=Range(1, 1 << 20),
    ),
    Key(
        "jepa.text.pos_offset",
        U32,
        TEXT,
        "the position id of a sequence's first token (XLM-RoBERTa: padding_idx + 1)",
        default=0,
        range=Range(0, 65536),
    ),
    Key("jepa.text.tokenizer", STR, TEXT, "the model's tokenizer.json (HF tokenizers), verbatim",
        required=True),
    Key(
        "jepa.text.layout", STR, TEXT, "the source architecture (`BertModel`, `XLMRobertaModel`)", read=False
    ),
    # -- preprocessing -------------------------------------------------------------------------
    Key("jepa.pre.mean", GType.F32_3, VISION, "per-channel mean, after the rescale", default=(0.5, 0.5, 0.5)),
    Key(
        "jepa.pre.std",
        GType.F32_3,
        VISION,
        "per-channel std",
        default=(0.5, 0.5, 0.5),
        range=Range(0, open=True),
    ),
    Key(
        "jepa.pre.rescale", F32, VISION, "pixel scale before normalising", default=1 / 255,
        range=Range(0, open=True),
    ),
    Key(
        "jepa.pre.crop",
        U32,
        VISION,
        "the side the encoder sees",
        absent="`jepa.enc.img_size`",
        range=Range(1, 8192),
    ),
    Key(
        "jepa.pre.resize_short",
        U32,
        VISION,
        "`shortest_edge`: the short side before the centre crop",
        absent="`jepa.pre.crop`",
        range=Range(1, 16384),
    ),
    Key(
        "jepa.pre.resize_mode",
        STR,
        VISION,
        "`shortest_edge` (resize the short side, centre-crop) or `squash` (resize to crop x crop)",
        default="shortest_edge",
        allowed=("shortest_edge", "squash"),
    ),
    Key(
        "jepa.pre.resample",
        STR,
        VISION,
        "the resize filter",
        default="bilinear",
        allowed=("bilinear", "bicubic"),
    ),
    # -- the classifier head -------------------------------------------------------------------
    Key(
        "jepa.head.kind",
        STR,
        VISION,
        "the head on the encoder tokens",
        default="none",
        allowed=("none", "attentive_pool"),
    ),
    Key("jepa.head.n_classes", U32, HEAD, "C, the classes", required=True, range=Range(1, 1 << 20)),
    Key(
        "jepa.head.n_pool_layers",
        U32,
        HEAD,
        "self-attention blocks before the cross-attention",
        required=True,
        range=Range(0, 64),
    ),
    Key(
        "jepa.head.labels",
        GType.STRS,
        HEAD,
        "class names, one per class (at most 100000)",
        absent="no labels",
    ),
    # -- the predictors ------------------------------------------------------------------------
    Key("jepa.pred.kind", STR, VISION, "the predictor", absent="no predictor", allowed=tuple(PRED_KINDS)),
    Key(
        "jepa.pred.kind",
        STR,
        (Scope.LEWM_FAMILY,),
        "a LeWM file holds its predictor",
        required=True,
        allowed=("lewm",),
    ),
    Key("jepa.pred.embed_dim", U32, PRED, "Dp, the predictor width", required=True, range=Range(1, 16384)),
    Key("jepa.pred.n_layer", U32, PRED, "blocks", required=True, range=Range(1, 256)),
    Key("jepa.pred.n_head", U32, PRED, "attention heads", required=True, range=Range(1, 256)),
    Key("jepa.pred.ffn_dim", U32, PRED, "Fp, the MLP width", required=True, range=Range(1, 65536)),
    Key(
        "jepa.pred.out_dim",
        U32,
        PRED,
        "the width it predicts: the encoder's (a V-JEPA 2.1 predictor's own: its teacher's width, or "
        "levels x D)",
        absent="`jepa.enc.embed_dim`",
        range=Range(1, 16384),
    ),
    Key(
        "jepa.pred.ln_eps", F32, PRED, "the affine LayerNorms' epsilon", absent="`jepa.enc.ln_eps`", range=EPS
    ),
    Key(
        "jepa.pred.act",
        STR,
        ROPE_PRED,
        "the blocks' MLP activation",
        absent="`jepa.enc.act`",
        allowed=("gelu_erf", "gelu_tanh"),
    ),
    Key("jepa.pred.act", STR, LEWM, "the blocks' MLP activation", absent="`jepa.enc.act`", allowed=ACTS),
    Key(
        "jepa.pred.head_dim",
        U32,
        ROPE_PRED,
        "width per head; only Dp / n_head is supported",
        absent="Dp / n_head",
        range=Range(1, 4096),
    ),
    Key(
        "jepa.pred.head_dim",
        U32,
        LEWM,
        "width per head: n_head x head_dim may differ from Dp",
        absent="Dp / n_head",
        range=Range(1, 4096),
    ),
    Key(
        "jepa.pred.grid_size",
        U32,
        ROPE_PRED,
        "patches per side at the native size: ids decompose on it, "
        "RoPE rows and columns scale by grid_size / grid",
        absent="img_size / patch_size",
        range=Range(1, 8192),
    ),
    *_rope("jepa.pred.", ROPE_PRED, interpolate=False),
    Key("jepa.pred.n_mask_tokens", U32, MASKED, "learned mask tokens", required=True, range=Range(1, 1024)),
    Key(
        "jepa.pred.in_levels",
        U32,
        MASKED,
        "encoder levels the context tokens carry side by side: 1 reads `pred.embed`; L > 1 (V-JEPA 2.1 "
        "g/G: the encoder's `hier_layers` count) reads `pred.embed.0` -> GELU -> `pred.embed.2`",
        default=1,
        range=Range(1, 64),
    ),
    Key(
        "jepa.pred.modality_embed",
        BOOL,
        MASKED,
        "`pred.mod_embed_video` / `pred.mod_embed_img` added to every token after the mask tokens are "
        "placed, by the request's modality (V-JEPA 2.1)",
        default=False,
    ),
    Key(
        "jepa.pred.proj_context",
        BOOL,
        MASKED,
        "`pred.proj_context` projects the context rows too (V-JEPA 2.1's x_context)",
        default=False,
    ),
    Key("jepa.pred.n_frames", U32, MASKED, "the clip length it was trained on", read=False),
    Key(
        "jepa.pred.n_frames",
        U32,
        AC,
        "latent frames upstream's frame-causal mask covers (num_frames / tubelet)",
        absent="0 (not recorded)",
        range=Range(1, 1 << 16),
    ),
    Key(
        "jepa.pred.n_frames",
        U32,
        LEWM,
        "the window: rows of `pred.pos_embed`",
        required=True,
        range=Range(1, 1024),
    ),
    Key(
        "jepa.pred.action_dim",
        U32,
        AC,
        "A, the action width (7: xyz, 3 Euler angles, gripper)",
        required=True,
        range=Range(1, 1024),
    ),
    Key(
        "jepa.pred.action_dim",
        U32,
        LEWM,
        "A = frameskip x the environment's action width",
        required=True,
        range=Range(1, 65536),
    ),
    Key("jepa.pred.state_dim", U32, AC, "S, the state width (7)", required=True, range=Range(1, 1024)),
    Key(
        "jepa.pred.n_cond_tokens",
        U32,
        AC,
        "conditioning tokens per frame",
        default=2,
        range=Range(0, 16),
        allowed=(2,),
    ),
    Key(
        "jepa.pred.cond_order",
        STR,
        AC,
        "per frame the sequence is [action, state, HW patch tokens]",
        default="action,state",
        allowed=("action,state",),
    ),
    Key(
        "jepa.pred.frame_causal",
        BOOL,
        (Scope.AC, Scope.LEWM),
        "a token of frame t sees frames 0..t",
        default=True,
        allowed=(True,),
    ),
    Key(
        "jepa.pred.norm_reps_eps",
        F32,
        AC,
        "the non-affine LayerNorm of the latents, before the predictor and between steps",
        default=1e-5,
        range=EPS,
    ),
    Key("jepa.pred.normalize_reps", BOOL, AC, "always true: the engine normalises the latents", read=False),
    Key(
        "jepa.pred.qkv_bias",
        BOOL,
        (Scope.AC, Scope.LEWM),
        "whether `attn_qkv` has a bias (the engine reads the tensors)",
        read=False,
    ),
    Key(
        "jepa.pred.adaln_eps",
        F32,
        LEWM,
        "the two non-affine LayerNorms each block modulates",
        default=1e-6,
        range=EPS,
    ),
    Key(
        "jepa.pred.action_act",
        STR,
        LEWM,
        "`pred.action_embed.0` -> act -> `pred.action_embed.2`",
        default="silu",
        allowed=ACTS,
    ),
    Key(
        "jepa.pred.proj_act",
        STR,
        LEWM,
        "`pred.proj.0` -> act -> `pred.proj.2`",
        default="gelu_erf",
        allowed=ACTS,
    ),
)


def scopes_of(values: Mapping[str, Any]) -> set[Scope]:
    """The scopes a file with these metadata values belongs to."""
    out = {Scope.ALL}
    if values.get("jepa.family") in TEXT_FAMILIES:
        return out | {Scope.TEXT}
    out.add(Scope.VISION)
    if values.get("jepa.enc.pos_type") == "rope3d":
        out.add(Scope.ROPE)
    if values.get("jepa.head.kind", "none") != "none":
        out.add(Scope.HEAD)
    kind = values.get("jepa.pred.kind")
    if kind is not None:
        out.add(Scope.PRED)
        if kind in PRED_KINDS:
            out.add(PRED_KINDS[kind])
    if values.get("jepa.family") == "lewm":
        out.add(Scope.LEWM_FAMILY)
    if values.get("jepa.family") == "vjepa2_1":
        out.add(Scope.VJEPA2_1)
    return out


def keys_for(scopes: Iterable[Scope]) -> dict[str, list[Key]]:
    """name -> the declarations that apply to a file of these scopes."""
    s = set(scopes)
    out: dict[str, list[Key]] = {}
    for k in KEYS:
        if s.intersection(k.scope):
            out.setdefault(k.name, []).append(k)
    return out


def validate(values: Mapping[str, Any]) -> None:
    """Every key declared for this file and holding an allowed value, every required key present:
    a file that passes is one the loader accepts, as far as its metadata goes."""
    declared = keys_for(scopes_of(values))
    for name, value in values.items():
        if name not in declared:
            raise ValueError(f"metadata key {name}: not a key of this file (see docs/gguf.md)")
        for key in declared[name]:
            key.check(value)
    missing = [n for n, ks in declared.items() if n not in values and any(k.required for k in ks)]
    if missing:
        raise ValueError(f"missing metadata key(s): {', '.join(missing)}")


# The keys recipe_conflict reads.
RECIPE_KEYS = ("jepa.family", "jepa.enc.img_size", "jepa.enc.patch_size", "jepa.enc.pos_type",
               "jepa.pre.crop")


def recipe_conflict(values: Mapping[str, Any]) -> str | None:
    """Why a vision file's preprocessing recipe makes inputs its own encoder refuses, or None.

    The recipe's output is jepa.pre.crop pixels square. The engine (csrc/src/vit.cpp, encoder_grid)
    takes an input side that is a multiple of the patch size, and with a stored position table
    (pos_type learned or sincos2d) only the native grid, jepa.enc.img_size: it does not interpolate
    positions. A file that breaks this loads and then refuses every request. (Without the encoder's
    sizes there is nothing to compare: the loader names the missing key.)"""
    if values.get("jepa.family") in TEXT_FAMILIES:
        return None
    if values.get("jepa.enc.img_size") is None or values.get("jepa.enc.patch_size") is None:
        return None
    img, patch = int(values["jepa.enc.img_size"]), int(values["jepa.enc.patch_size"])
    crop = int(values.get("jepa.pre.crop", img))
    if values.get("jepa.enc.pos_type", "learned") in ("learned", "sincos2d") and crop != img:
        return (f"the preprocessing recipe makes {crop}x{crop} px inputs (jepa.pre.crop {crop}), but the "
                f"model's position table covers {img}x{img} px (jepa.enc.img_size {img}) and the engine "
                "does not interpolate positions: every request would be refused")
    if crop % patch:
        return (f"the preprocessing recipe makes {crop}x{crop} px inputs (jepa.pre.crop {crop}), not a "
                f"multiple of the model's patch size {patch} (jepa.enc.patch_size): every request would "
                "be refused")
    return None
