"""/info's model object: the explicit, documented shape (docs/serving.md), field by field, with the
engine's enums spelled as GGUF files spell them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import jepa
from jepa_server.model_info import ENUMS, FIELDS, model_json

# The documented shape: a field the engine adds is not published until it is chosen here.
DOCUMENTED = {
    "name", "family", "modality", "backend", "matmul", "n_matmul_packed", "file_type", "n_params",
    "n_bytes", "embed_dim", "n_layer", "n_head", "ffn_dim", "patch_size", "tubelet_size", "img_size",
    "n_frames", "in_chans", "has_cls", "n_registers", "pos_type", "attn_mode", "ln_eps", "n_levels",
    "image_patch_embed", "head_kind",
    "n_labels", "n_classes", "pred_kind", "pred_embed_dim", "pred_n_layer", "pred_n_head",
    "pred_n_mask_tokens", "pred_grid_size", "pred_action_dim", "pred_state_dim", "pred_n_frames",
    "wm_embed_dim", "pred_norm_reps_eps", "preprocess", "pool",
}  # fmt: skip


@pytest.mark.parametrize(
    ("path_fixture", "kinds", "pools"),
    [
        ("tiny_vit_path", ("none", "none", "learned"), ("cls", ["mean", "cls", "none"])),
        ("tiny_vjepa2_path", ("attentive_pool", "masked", "rope3d"), ("mean", ["mean", "none"])),
        ("tiny_ac_path", ("none", "ac", "rope3d"), ("mean", ["mean", "none"])),
        ("tiny_lewm_path", ("none", "lewm", "learned"), ("lewm", ["mean", "cls", "none", "lewm"])),
    ],
)
def test_shape_and_spelling(
    request: pytest.FixtureRequest, path_fixture: str, kinds: tuple[str, ...], pools: tuple[str, list[str]]
) -> None:
    model = jepa.Model(request.getfixturevalue(path_fixture))
    out = model_json(model)
    assert set(out) == DOCUMENTED
    # Each model lists the pool modes it takes, and every one of them is accepted.
    assert (out["pool"]["default"], out["pool"]["modes"]) == pools
    assert all(jepa.check_pool(model, m) == m for m in out["pool"]["modes"])
    assert (out["head_kind"], out["pred_kind"], out["pos_type"]) == kinds
    assert set(out["preprocess"]) == {
        "mean",
        "std",
        "rescale",
        "resize_short",
        "crop",
        "resize_mode",
        "resample",
    }
    assert out["preprocess"]["resize_mode"] in ("shortest_edge", "squash")
    assert out["preprocess"]["resample"] in ("bilinear", "bicubic")
    assert out["embed_dim"] == model.info.embed_dim and out["family"] == model.info.family
    json.dumps(out)  # plain JSON: no engine object leaks into the answer


def test_every_published_field_is_an_engine_field() -> None:
    """A renamed or dropped ModelInfo field fails here, not as a silently missing API key."""
    published = set(FIELDS) | set(ENUMS)
    assert published | {"preprocess", "pool", "attn_mode"} == DOCUMENTED
    engine = {n for n in dir(jepa.ModelInfo) if not n.startswith("_")}
    assert published | {"block_causal"} <= engine, published - engine  # attn_mode spells block_causal


def test_a_text_model_publishes_its_poolings_and_no_pixel_recipe(tmp_path: Path) -> None:
    from jepa.testing.random_text import write_random_bert

    model = jepa.Model(write_random_bert(tmp_path / "t.gguf", pooling="cls"))
    out = model_json(model)
    assert set(out) == DOCUMENTED - {"preprocess"}
    assert out["pool"] == {"default": "cls", "modes": ["cls", "mean", "last_token"]}
    assert list(jepa.pooling.TEXT_POOL_MODES) == out["pool"]["modes"]
