"""/info's model object: the explicit, documented shape (docs/serving.md), field by field, with the
engine's enums spelled as GGUF files spell them."""

from __future__ import annotations

import json

import pytest

import jepa
from jepa_server.model_info import ENUMS, FIELDS, model_json

# The documented shape: a field the engine adds is not published until it is chosen here.
DOCUMENTED = {
    "name", "family", "modality", "backend", "matmul", "n_matmul_packed", "file_type", "n_params",
    "n_bytes", "embed_dim", "n_layer", "n_head", "ffn_dim", "patch_size", "tubelet_size", "img_size",
    "n_frames", "in_chans", "has_cls", "n_registers", "pos_type", "ln_eps", "head_kind", "n_labels",
    "n_classes", "pred_kind", "pred_embed_dim", "pred_n_layer", "pred_n_head", "pred_n_mask_tokens",
    "pred_grid_size", "pred_action_dim", "pred_state_dim", "pred_n_frames", "wm_embed_dim",
    "pred_norm_reps_eps", "preprocess",
}  # fmt: skip


@pytest.mark.parametrize(
    ("path_fixture", "kinds"),
    [
        ("tiny_vit_path", ("none", "none", "learned")),
        ("tiny_vjepa2_path", ("attentive_pool", "masked", "rope3d")),
        ("tiny_ac_path", ("none", "ac", "rope3d")),
        ("tiny_lewm_path", ("none", "lewm", "learned")),
    ],
)
def test_shape_and_spelling(
    request: pytest.FixtureRequest, path_fixture: str, kinds: tuple[str, ...]
) -> None:
    model = jepa.Model(request.getfixturevalue(path_fixture))
    out = model_json(model)
    assert set(out) == DOCUMENTED
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
    assert published | {"preprocess"} == DOCUMENTED
    engine = {n for n in dir(jepa.ModelInfo) if not n.startswith("_")}
    assert published <= engine, published - engine
