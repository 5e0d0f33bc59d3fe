"""jepa.embed / encode_prepared: input order, grouping by shape, batch invariance, pooling, errors."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import skimage.data
from PIL import Image

import jepa
from jepa import media
from jepa.pipeline import embed, encode_prepared

from conftest import bits

pytestmark = pytest.mark.every_path


@pytest.fixture(scope="module")
def model(tiny_vit_path: str) -> jepa.Model:
    return jepa.Model(tiny_vit_path)


@pytest.fixture(scope="module")
def items() -> list[Any]:
    """Seven real-photo items in every form embed takes."""
    coffee, cat, rocket = skimage.data.coffee(), skimage.data.chelsea(), skimage.data.rocket()
    buf = io.BytesIO()
    Image.fromarray(cat).save(buf, "JPEG", quality=90)
    return [
        coffee,
        buf.getvalue(),
        Image.fromarray(rocket[:200, :300]),
        skimage.data.astronaut()[::3, ::3],
        np.ascontiguousarray(coffee.transpose(1, 0, 2)),  # portrait
        Image.fromarray(skimage.data.camera()),  # grey, converted to RGB
        cat[40:60, 100:190],  # small, wide
    ]



def test_batched_equals_one_at_a_time_in_input_order(model: jepa.Model, items: list[Any]) -> None:
    batched = embed(model.context(max_batch=4), items)
    assert batched.shape == (len(items), model.embed_dim) and batched.dtype == np.float32
    one = model.context(max_batch=1)
    singles = np.stack([embed(one, [it])[0] for it in items])
    assert np.array_equal(bits(batched), bits(singles))
    backwards = embed(model.context(max_batch=3), items[::-1])
    assert np.array_equal(bits(backwards[::-1]), bits(batched))


@pytest.mark.parametrize("pool", ["cls", "mean", "none"])
def test_pooling_of_the_encoder_tokens(model: jepa.Model, items: list[Any], pool: str) -> None:
    ctx = model.context()
    tokens = ctx.encode(np.stack([media.prepare(it, model) for it in items[:3]]))
    out = embed(ctx, items[:3], pool=pool)
    if pool == "cls":
        expected = tokens[:, 0]
    elif pool == "mean":
        expected = np.stack([t[model.n_prefix :].mean(axis=0, dtype=np.float32) for t in tokens])
    else:
        expected = tokens
    assert out.shape == expected.shape
    assert np.array_equal(bits(out), bits(expected))


def test_default_pool_is_cls_for_a_model_with_cls(model: jepa.Model, items: list[Any]) -> None:
    ctx = model.context()
    assert model.has_cls
    assert np.array_equal(bits(embed(ctx, items[:2])), bits(embed(ctx, items[:2], pool="cls")))


def test_encode_prepared_is_what_embed_runs(model: jepa.Model, items: list[Any]) -> None:
    ctx = model.context(max_batch=2)
    rows = encode_prepared(ctx, [media.prepare(it, model) for it in items], None)
    assert len(rows) == len(items) and all(r.shape == (model.embed_dim,) for r in rows)
    assert np.array_equal(bits(np.stack(rows)), bits(embed(ctx, items)))


def test_files_and_arrays_of_the_same_image_agree(model: jepa.Model, tmp_path: Path) -> None:
    photo = skimage.data.coffee()
    path = tmp_path / "coffee.png"
    Image.fromarray(photo).save(path)
    out = embed(model.context(), [photo, str(path), path, path.read_bytes(), Image.fromarray(photo)])
    assert all(np.array_equal(bits(out[0]), bits(row)) for row in out[1:])


def test_empty_input(model: jepa.Model) -> None:
    assert embed(model.context(), []).shape == (0, model.embed_dim)


def test_errors_name_the_item(model: jepa.Model, items: list[Any]) -> None:
    ctx = model.context()
    with pytest.raises(jepa.InvalidInputError, match=r"^item 1: not an image or a video"):
        embed(ctx, [items[0], b"not a picture at all" * 10])
    with pytest.raises(jepa.InvalidInputError, match="wrap it in a list"):
        embed(ctx, "photo.jpg")  # type: ignore[arg-type]
    with pytest.raises(jepa.InvalidInputError, match="unknown pool"):
        embed(ctx, items[:1], pool="max")
    with pytest.raises(jepa.InvalidInputError, match="input 0: expected a prepared float32"):
        encode_prepared(ctx, [np.zeros((3, 1, 32, 32))], None)


class RecordingContext:
    """A stand-in Context: records each encode's batch shape; tokens carry each item's pixel sum."""

    def __init__(self, max_batch: int, has_cls: bool = True) -> None:
        self.max_batch = max_batch
        self.model = SimpleNamespace(
            has_cls=has_cls, n_prefix=int(has_cls), embed_dim=2, world_model="",
            info=SimpleNamespace(family="stand-in", modality="image"),
        )
        self.calls: list[tuple[int, ...]] = []

    def encode(self, x: np.ndarray, levels: bool = False) -> np.ndarray:
        assert not levels  # no pool of these tests asks for every level
        self.calls.append(x.shape)
        s = x.reshape(len(x), -1).sum(axis=1, dtype=np.float32)
        return (
            np.repeat(s[:, None, None], 3, axis=1).repeat(2, axis=2) + np.arange(3, dtype=np.float32)[:, None]
        )


def test_same_shapes_are_grouped_into_batches_of_at_most_max_batch() -> None:
    a, b = (3, 1, 4, 4), (3, 2, 4, 4)
    shapes = [a, b, a, a, b, a, a]
    inputs = [np.full(s, i, np.float32) for i, s in enumerate(shapes)]
    ctx = RecordingContext(max_batch=2)
    rows = encode_prepared(ctx, inputs, "cls")
    assert ctx.calls == [(2, *a), (2, *a), (1, *a), (2, *b)]  # a's first: it appeared first
    assert [float(r[0]) for r in rows] == [float(x.sum()) for x in inputs]  # back in input order


def test_bad_pool_costs_no_encode() -> None:
    ctx = RecordingContext(max_batch=4, has_cls=False)
    with pytest.raises(jepa.InvalidInputError, match="no CLS token"):
        encode_prepared(ctx, [np.zeros((3, 1, 4, 4), np.float32)], "cls")
    assert ctx.calls == []
