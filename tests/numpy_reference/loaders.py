"""Build the reference models from a converted GGUF file alone: its keys and tensors (numpy order,
as the converter wrote them). What cannot be built from the file is not in the file, which is the
point: these loaders are the proof that a file carries everything the engine needs."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .lewm import ActionEmbedder, AdaLNBlock, ARPredictor, LeWM, Projector
from .ops import LayerNorm, Linear, f64
from .vit import Block, HFViT, VJEPA2Encoder
from .vjepa2_ac import ACPredictor, ACWorldModel

Keys = Mapping[str, Any]
Tensors = Mapping[str, np.ndarray]


def read_gguf(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(keys, tensors) of a GGUF file; tensors in numpy order (the reverse of ggml's ne[])."""
    import gguf

    r = gguf.GGUFReader(path)
    keys = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    tensors = {t.name: np.array(t.data).reshape([int(n) for n in reversed(t.shape)]) for t in r.tensors}
    return keys, tensors


def _getters(tensors: Tensors) -> tuple[Callable[[str], Linear], Callable[[str, float], LayerNorm]]:
    def linear(name: str) -> Linear:
        b = tensors.get(f"{name}.bias")
        return Linear(f64(tensors[f"{name}.weight"]), None if b is None else f64(b))

    def norm(name: str, eps: float) -> LayerNorm:
        return LayerNorm(eps, f64(tensors[f"{name}.weight"]), f64(tensors[f"{name}.bias"]))

    return linear, norm


def _qkv(tensors: Tensors, prefix: str) -> Linear:
    """The fused q;k;v projection, from attn_qkv or from separate attn_q / attn_k / attn_v."""
    if f"{prefix}attn_qkv.weight" in tensors:
        b = tensors.get(f"{prefix}attn_qkv.bias")
        return Linear(f64(tensors[f"{prefix}attn_qkv.weight"]), None if b is None else f64(b))
    parts = [f"{prefix}attn_{x}" for x in "qkv"]
    w = np.concatenate([f64(tensors[f"{p}.weight"]) for p in parts])
    has_b = all(f"{p}.bias" in tensors for p in parts)
    return Linear(w, np.concatenate([f64(tensors[f"{p}.bias"]) for p in parts]) if has_b else None)


def _blocks(keys: Keys, tensors: Tensors, part: str) -> list[Block]:
    linear, norm = _getters(tensors)
    eps = float(keys[f"jepa.{part}.ln_eps"])
    out = []
    for i in range(int(keys[f"jepa.{part}.n_layer"])):
        p = f"{part}.blk.{i}."
        out.append(Block(norm(p + "ln1", eps), _qkv(tensors, p), linear(p + "attn_out"), norm(p + "ln2", eps),
                         linear(p + "ffn_up"), linear(p + "ffn_down"), int(keys[f"jepa.{part}.n_head"]),
                         str(keys.get(f"jepa.{part}.act", "gelu_erf"))))
    return out


def _hf_vit(keys: Keys, tensors: Tensors) -> HFViT:
    linear, norm = _getters(tensors)
    return HFViT(linear("enc.patch_embed"), f64(tensors["enc.cls_token"]), f64(tensors["enc.pos_embed"]),
                 _blocks(keys, tensors, "enc"), norm("enc.norm", float(keys["jepa.enc.ln_eps"])),
                 int(keys["jepa.enc.patch_size"]))


def _vjepa2_encoder(keys: Keys, tensors: Tensors) -> VJEPA2Encoder:
    linear, norm = _getters(tensors)
    return VJEPA2Encoder(linear("enc.patch_embed"), _blocks(keys, tensors, "enc"),
                         norm("enc.norm", float(keys["jepa.enc.ln_eps"])), int(keys["jepa.enc.patch_size"]),
                         int(keys["jepa.enc.tubelet_size"]))


def lewm_from_gguf(keys: Keys, tensors: Tensors) -> LeWM:
    if keys.get("jepa.pred.kind") != "lewm":
        raise ValueError(f"not a LeWM file (jepa.pred.kind={keys.get('jepa.pred.kind')})")
    linear, norm = _getters(tensors)
    ln_eps, adaln_eps = float(keys["jepa.pred.ln_eps"]), float(keys["jepa.pred.adaln_eps"])
    act = str(keys["jepa.pred.act"])
    blocks = []
    for i in range(int(keys["jepa.pred.n_layer"])):
        p = f"pred.blk.{i}."
        blocks.append(AdaLNBlock(linear(p + "adaln"), norm(p + "ln1", ln_eps), linear(p + "attn_qkv"),
                                 linear(p + "attn_out"), norm(p + "ln2", ln_eps), linear(p + "ffn_up"),
                                 linear(p + "ffn_down"), int(keys["jepa.pred.n_head"]), adaln_eps, act))
    predictor = ARPredictor(f64(tensors["pred.pos_embed"]), blocks, norm("pred.norm", ln_eps))
    encoder = _hf_vit(keys, tensors) if "enc.patch_embed.weight" in tensors else None
    return LeWM(
        encoder=encoder,
        projector=Projector(linear("enc.proj.0"), linear("enc.proj.2"), act=str(keys["jepa.enc.proj_act"])),
        action_embed=ActionEmbedder(linear("pred.action_embed.0"), linear("pred.action_embed.2"),
                                    act=str(keys["jepa.pred.action_act"])),
        predictor=predictor,
        pred_proj=Projector(linear("pred.proj.0"), linear("pred.proj.2"),
                            act=str(keys["jepa.pred.proj_act"])),
    )


def ac_from_gguf(keys: Keys, tensors: Tensors) -> ACWorldModel:
    if keys.get("jepa.pred.kind") != "ac":
        raise ValueError(f"not a V-JEPA 2-AC file (jepa.pred.kind={keys.get('jepa.pred.kind')})")
    cond = (keys.get("jepa.pred.cond_order"), keys.get("jepa.pred.n_cond_tokens"))
    if cond != ("action,state", 2):
        raise ValueError("unsupported conditioning tokens (only [action, state] per frame)")
    linear, norm = _getters(tensors)
    grid = int(keys["jepa.pred.grid_size"])
    predictor = ACPredictor(
        embed=linear("pred.embed"),
        action_embed=linear("pred.action_embed"),
        state_embed=linear("pred.state_embed"),
        blocks=_blocks(keys, tensors, "pred"),
        norm=norm("pred.norm", float(keys["jepa.pred.ln_eps"])),
        proj=linear("pred.proj"),
        grid=(grid, grid),
        frame_causal=bool(keys["jepa.pred.frame_causal"]),
    )
    encoder = _vjepa2_encoder(keys, tensors) if "enc.patch_embed.weight" in tensors else None
    return ACWorldModel(encoder, predictor, float(keys["jepa.pred.norm_reps_eps"]))


def from_gguf(path: str | os.PathLike[str]) -> LeWM | ACWorldModel:
    """The reference model of a world-model GGUF file (jepa.pred.kind lewm or ac)."""
    keys, tensors = read_gguf(path)
    kind = keys.get("jepa.pred.kind")
    if kind == "lewm":
        return lewm_from_gguf(keys, tensors)
    if kind == "ac":
        return ac_from_gguf(keys, tensors)
    raise ValueError(f"{path}: not a world-model file (jepa.pred.kind={kind})")
