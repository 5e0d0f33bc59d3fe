"""jepa.classify: the one classification pipeline (prepare -> batched encode + head -> softmax and top-k
per row). Its answers for a batch are the answers for each item alone, bit for bit; top-k breaks ties
toward the smaller class index; a model without a head is refused before any compute.

The suite's tiny V-JEPA 2 (conftest: tiny_vjepa2_path, random weights from numpy, no torch)."""

from __future__ import annotations

import numpy as np
import pytest

import jepa
from jepa.classify import answer, softmax, top_k
from jepa.media import prepare

from conftest import TINY_VJEPA2

pytestmark = pytest.mark.every_path

SIZE = TINY_VJEPA2["img_size"]


@pytest.fixture(scope="module")
def model(tiny_vjepa2_path: str) -> jepa.Model:
    return jepa.Model(tiny_vjepa2_path)


def frames(n: int, seed: int) -> np.ndarray:
    """A uint8 clip [T, H, W, 3] at the model's crop size (prepare resizes and crops it like any)."""
    return np.random.default_rng(seed).integers(0, 256, (n, SIZE, SIZE, 3), dtype=np.uint8)


def test_top_k_ties_go_to_the_smaller_index() -> None:
    logits = np.array([1.0, 3.0, 2.0, 3.0, -1.0, 3.0], np.float32)
    assert top_k(logits, 4).tolist() == [1, 3, 5, 2]
    assert top_k(logits, 10).tolist() == [1, 3, 5, 2, 0, 4]
    assert top_k(np.zeros(4, np.float32), 2).tolist() == [0, 1]
    with pytest.raises(jepa.InvalidInputError):
        top_k(np.zeros((2, 3), np.float32), 1)


def test_softmax_is_stable_and_normalised() -> None:
    p = softmax(np.array([1000.0, 1000.0, -1000.0], np.float32))
    assert np.allclose(p, [0.5, 0.5, 0.0]) and abs(p.sum() - 1.0) < 1e-12
    rows = softmax(np.array([[0.0, np.log(3.0)], [2.0, 2.0]]))
    assert np.allclose(rows, [[0.25, 0.75], [0.5, 0.5]])


def test_answer_fields() -> None:
    a = answer(np.array([0.5, 2.0, 1.0], np.float32), ["a", "b", "c"], 2)
    assert a.labels == ["b", "c"] and a.indices == [1, 2]
    assert a.probabilities == pytest.approx(softmax(np.array([0.5, 2.0, 1.0]))[[1, 2]].tolist())
    d = a.to_dict()
    assert d["labels"] == ["b", "c"] and d["logits"] == pytest.approx([0.5, 2.0, 1.0])


def test_classify_clips(model: jepa.Model) -> None:
    ctx = model.context(threads=2)
    items = [frames(4, 0), list(frames(4, 1)), frames(3, 2)]  # an array, a list of frames, an odd clip
    out = jepa.classify(ctx, items, top_k=3)
    assert len(out) == 3
    for item, res in zip(items, out, strict=True):
        x = prepare(item, model)[None]
        logits, _ = ctx.classify(ctx.encode(x))
        assert res.logits.view(np.uint32).tobytes() == logits[0].view(np.uint32).tobytes()
        assert res.indices == top_k(logits[0], 3).tolist()
        assert res.labels == [model.labels[i] for i in res.indices]
        assert res.probabilities == sorted(res.probabilities, reverse=True)
        assert 0.0 < sum(res.probabilities) <= 1.0 + 1e-12


def test_batch_answers_are_single_answers(model: jepa.Model) -> None:
    ctx = model.context(threads=2, max_batch=4)
    inputs = [prepare(frames(4, s), model) for s in range(5)]
    together = jepa.classify_prepared(ctx, inputs, top_k=6)
    for x, res in zip(inputs, together, strict=True):
        alone = jepa.classify_prepared(model.context(threads=1), [x], top_k=6)[0]
        assert alone.logits.view(np.uint32).tobytes() == res.logits.view(np.uint32).tobytes()
        assert alone.indices == res.indices and alone.probabilities == res.probabilities


def test_refusals(model: jepa.Model, tiny_vjepa2_encoder_path: str) -> None:
    ctx = model.context(threads=2)
    with pytest.raises(jepa.InvalidInputError, match="top_k"):
        jepa.classify(ctx, [frames(4, 0)], top_k=0)
    with pytest.raises(jepa.InvalidInputError, match="list of items"):
        jepa.classify(ctx, frames(4, 0))
    with pytest.raises(jepa.InvalidInputError, match="item 1"):
        jepa.classify(ctx, [frames(4, 0), np.zeros((4, SIZE, SIZE), np.float32)])
    bare = jepa.Model(tiny_vjepa2_encoder_path).context(threads=2)
    with pytest.raises(jepa.UnsupportedError, match="no classifier head"):
        jepa.classify(bare, [frames(4, 0)])
    with pytest.raises(jepa.UnsupportedError, match="no classifier head"):
        bare.classify(np.zeros((1, 8, 64), np.float32))


def test_context_classify_checks(model: jepa.Model) -> None:
    ctx = model.context(threads=2)
    with pytest.raises(jepa.InvalidInputError, match="width 32"):
        ctx.classify(np.zeros((1, 8, 32), np.float32))
    with pytest.raises(jepa.InvalidInputError, match="float32"):
        ctx.classify(np.zeros((1, 8, 64), np.float64))
    with pytest.raises(jepa.InvalidInputError, match=r"\[B, N, D\]"):
        ctx.classify(np.zeros((8, 64), np.float32))
    logits, pooled = ctx.classify(np.zeros((2, 8, 64), np.float32))
    assert logits.shape == (2, 6) and pooled.shape == (2, 64) and np.isfinite(logits).all()
