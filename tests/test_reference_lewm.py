"""The numpy LeWM reference, built straight from the bundle's upstream weights.pt (unfolded
BatchNorm, separate Conv1d, legacy ViT names), against the goldens the le-wm code produced."""

from __future__ import annotations

import numpy as np
import pytest

from jepa.planning import lewm_cost, lewm_rollout

from conftest import LEWM_BUNDLE
from numpy_reference import assert_agrees, assert_rel_close
from numpy_reference.lewm import ActionEmbedder, AdaLNBlock, ARPredictor, LeWM, Projector
from numpy_reference.ops import BatchNorm, LayerNorm, Linear
from numpy_reference.vit import Block, HFViT

LEWM = LEWM_BUNDLE
# Parity of the numpy reference with the goldens (no engine at all): the default path alone runs it.
pytestmark = [pytest.mark.torch, pytest.mark.every_path, pytest.mark.parity]


def upstream_lewm(sd: dict[str, np.ndarray], config: dict) -> LeWM:
    """The reference from le-wm's own parameter names, every module as upstream runs it."""

    def lin(p: str) -> Linear:
        return Linear(sd[f"{p}.weight"], sd.get(f"{p}.bias"))

    def ln(p: str, eps: float) -> LayerNorm:
        return LayerNorm(eps, sd[f"{p}.weight"], sd[f"{p}.bias"])

    enc_cfg, pred_cfg = config["encoder"], config["predictor"]
    vit_blocks, i = [], 0
    while f"encoder.encoder.layer.{i}.layernorm_before.weight" in sd:
        p = f"encoder.encoder.layer.{i}."
        att = [f"{p}attention.attention.{n}" for n in ("query", "key", "value")]
        qkv = Linear(np.concatenate([sd[f"{a}.weight"] for a in att]),
                     np.concatenate([sd[f"{a}.bias"] for a in att]))
        vit_blocks.append(Block(ln(p + "layernorm_before", 1e-12), qkv, lin(p + "attention.output.dense"),
                                ln(p + "layernorm_after", 1e-12), lin(p + "intermediate.dense"),
                                lin(p + "output.dense"), enc_cfg["num_attention_heads"]))
        i += 1
    w = sd["encoder.embeddings.patch_embeddings.projection.weight"]
    emb = "encoder.embeddings."
    vit = HFViT(Linear(w.reshape(len(w), -1), sd[emb + "patch_embeddings.projection.bias"]),
                sd[emb + "cls_token"].reshape(-1), sd[emb + "position_embeddings"][0],
                vit_blocks, ln("encoder.layernorm", 1e-12), enc_cfg["patch_size"])

    def mlp(p: str) -> Projector:
        bn = BatchNorm(*(sd[f"{p}.net.1.{n}"] for n in ("running_mean", "running_var", "weight", "bias")))
        return Projector(lin(f"{p}.net.0"), lin(f"{p}.net.3"), bn)

    blocks = []
    for i in range(pred_cfg["depth"]):
        p = f"predictor.transformer.layers.{i}."
        blocks.append(AdaLNBlock(lin(p + "adaLN_modulation.1"), ln(p + "attn.norm", 1e-5),
                                 lin(p + "attn.to_qkv"), lin(p + "attn.to_out.0"), ln(p + "mlp.net.0", 1e-5),
                                 lin(p + "mlp.net.1"), lin(p + "mlp.net.4"), pred_cfg["heads"]))
    conv = sd["action_encoder.patch_embed.weight"]
    return LeWM(
        encoder=vit,
        projector=mlp("projector"),
        action_embed=ActionEmbedder(lin("action_encoder.embed.0"), lin("action_encoder.embed.2"),
                                    Linear(conv[:, :, 0], sd["action_encoder.patch_embed.bias"])),
        predictor=ARPredictor(sd["predictor.pos_embedding"][0], blocks,
                              ln("predictor.transformer.norm", 1e-5)),
        pred_proj=mlp("pred_proj"),
    )


@pytest.fixture(scope="module")
def model() -> LeWM:
    import json

    import torch

    sd = torch.load(LEWM / "weights.pt", weights_only=True)
    arrays = {k: v.numpy().astype(np.float64) for k, v in sd.items() if v.is_floating_point()}
    return upstream_lewm(arrays, json.loads((LEWM / "config.json").read_text()))


def g(name: str) -> np.ndarray:
    return np.load(LEWM / f"{name}.npy")


def test_encoder_and_projector(model: LeWM) -> None:
    assert model.encoder is not None
    pixels = g("pixels")[0]
    tokens = model.encoder(pixels[:3])
    assert_agrees(tokens, g("enc_tokens"), "enc_tokens")
    assert_agrees(model.projector(g("enc_cls")), g("emb")[0], "emb from enc_cls")
    assert_agrees(model.embed(pixels[:3]), g("emb")[0], "emb")
    assert_agrees(model.embed(pixels[3:]), g("goal_emb")[0], "goal_emb")


def test_action_embedder_and_predictor(model: LeWM) -> None:
    assert_agrees(model.action_embed(g("actions")), g("act_emb"), "act_emb")
    assert_agrees(model.predict_raw(g("emb"), g("actions")), g("pred_raw"), "pred_raw")
    assert_agrees(model.predict(g("emb"), g("actions")), g("pred"), "pred")


def test_rollouts_and_cost(model: LeWM) -> None:
    emb = g("emb")[0]
    assert_agrees(lewm_rollout(model.predict, emb[:1], g("cand_eval")[0]), g("rollout_h1")[0], "rollout_h1")
    assert_agrees(lewm_rollout(model.predict, emb, g("cand_hist")[0]), g("rollout_h3")[0], "rollout_h3")
    cost = lewm_cost(model.predict, emb[:1], g("goal_emb")[0, 0], g("cand_eval")[0])
    assert_rel_close(cost, g("cost_eval")[0], "cost_eval")
