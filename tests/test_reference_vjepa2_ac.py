"""The numpy V-JEPA 2-AC reference, built straight from the bundle's upstream checkpoint.pt (Meta's
names), against the goldens Meta's code produced: encoder, predictor taps and outputs, rollout."""

from __future__ import annotations

import numpy as np
import pytest

from jepa.planning import ac_rollout

from conftest import AC_BUNDLE
from numpy_reference import assert_agrees, assert_rel_close
from numpy_reference.ops import LayerNorm, Linear
from numpy_reference.vit import Block, VJEPA2Encoder
from numpy_reference.vjepa2_ac import ACPredictor, ACWorldModel

AC = AC_BUNDLE
# Parity of the numpy reference with the goldens (no engine at all): the default path alone runs it.
pytestmark = [pytest.mark.torch, pytest.mark.every_path, pytest.mark.parity]
HW = 36


def _blocks(sd: dict[str, np.ndarray], prefix: str, n_head: int) -> list[Block]:
    out, i = [], 0
    while f"{prefix}{i}.norm1.weight" in sd:
        p = f"{prefix}{i}."

        def lin(n: str, p: str = p) -> Linear:
            return Linear(sd[f"{p}{n}.weight"], sd[f"{p}{n}.bias"])

        def ln(n: str, p: str = p) -> LayerNorm:
            return LayerNorm(1e-6, sd[f"{p}{n}.weight"], sd[f"{p}{n}.bias"])

        out.append(Block(ln("norm1"), lin("attn.qkv"), lin("attn.proj"), ln("norm2"), lin("mlp.fc1"),
                         lin("mlp.fc2"), n_head))
        i += 1
    return out


def upstream_ac(enc: dict[str, np.ndarray], pred: dict[str, np.ndarray]) -> ACWorldModel:
    """The reference from Meta's parameter names (prefixes removed like _clean_backbone_key)."""
    w = enc["patch_embed.proj.weight"]  # [D, 3, 2, 16, 16]
    encoder = VJEPA2Encoder(Linear(w.reshape(len(w), -1), enc["patch_embed.proj.bias"]),
                            _blocks(enc, "blocks.", 2), LayerNorm(1e-6, enc["norm.weight"], enc["norm.bias"]),
                            patch=16, tubelet=2)

    def lin(n: str) -> Linear:
        return Linear(pred[f"{n}.weight"], pred[f"{n}.bias"])

    predictor = ACPredictor(lin("predictor_embed"), lin("action_encoder"), lin("state_encoder"),
                            _blocks(pred, "predictor_blocks.", 2),
                            LayerNorm(1e-6, pred["predictor_norm.weight"], pred["predictor_norm.bias"]),
                            lin("predictor_proj"), grid=(6, 6))
    return ACWorldModel(encoder, predictor)


@pytest.fixture(scope="module")
def model() -> ACWorldModel:
    import torch

    ckpt = torch.load(AC / "checkpoint.pt", weights_only=True)

    def clean(sd: dict) -> dict[str, np.ndarray]:
        return {k.replace("module.", "").replace("backbone.", ""): v.numpy().astype(np.float64)
                for k, v in sd.items()}

    return upstream_ac(clean(ckpt["encoder"]), clean(ckpt["predictor"]))


def g(name: str) -> np.ndarray:
    return np.load(AC / f"{name}.npy")


def test_encoder(model: ACWorldModel) -> None:
    assert model.encoder is not None
    clip = g("input_clip")  # [1, C, T=2, H, W]
    frames = clip[0].transpose(1, 0, 2, 3)  # [T, C, H, W]
    per_frame = np.repeat(frames[:, :, None], 2, axis=2)  # each frame fills one tubelet
    assert_agrees(model.encoder(per_frame).reshape(1, 2 * HW, -1), g("enc_raw"), "enc_raw")
    assert_agrees(model.encoder(clip[:, :, [0, 1, 1, 0]]), g("enc_video4"), "enc_video4")  # t = 0, 1
    z = model.encode_frames(frames)
    assert_agrees(z[:1], g("z_ctx"), "z_ctx")
    assert_agrees(z[1:], g("z_goal"), "z_goal")


def test_predictor_taps_and_outputs(model: ACWorldModel) -> None:
    en, acts, states = g("enc_norm"), g("ctx_actions"), g("ctx_states")
    taps: dict[str, np.ndarray] = {}
    assert_agrees(model.predictor(en, acts[:, :2], states[:, :2], taps), g("pred_ctx2"), "pred_ctx2")
    assert_agrees(taps["block0_in"], g("pred_ctx2_block0_in"), "block0_in")
    assert_agrees(taps["block0_out"], g("pred_ctx2_block0_out"), "block0_out")
    z3 = np.concatenate([en[:, :HW], en[:, HW:], en[:, :HW]], axis=1)  # f0, f1, f0
    assert_agrees(model.predict(z3, acts, states), g("pred_ctx3"), "pred_ctx3")


def test_rollout(model: ACWorldModel) -> None:
    out = ac_rollout(model.predict, g("z_ctx")[0], g("states")[0, 0], g("rollout_actions"), g("z_goal")[0],
                     return_latents=True)
    assert_agrees(out["latents"], g("rollout_latents"), "rollout_latents")
    assert_rel_close(out["energies"], g("rollout_energy"), "rollout_energy")
    np.testing.assert_array_equal(out["states"], g("rollout_poses"))
