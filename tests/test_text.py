"""Text models (family bert) without torch: the engine's padding-free encode on tiny random files —
bit-identity alone / in mixed-length batches / under any token budget, pooling and normalisation
against numpy on the engine's own tokens, the tokenizer's truncation counted, and every refusal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import jepa
from jepa.pooling import TEXT_POOL_MODES
from jepa.testing.random_text import tiny_tokenizer_json, write_random_bert
from jepa.text import Tokens, embed_text, encode_tokens, token_batches, tokens_from_ids

# @pytest.mark.parity (pooling within a tolerance of numpy, f32): the default path alone runs it.
pytestmark = pytest.mark.every_path

SENTENCES = [
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "a",
    "one two three four five six seven eight nine ten, and again: one two three four five six seven",
    "cat",
    "This photo of a cat is not a photo of a dog.",
    "query: fast text embed server",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> jepa.Model:
    return jepa.Model(write_random_bert(tmp_path_factory.mktemp("bert") / "t.gguf", max_seq_len=24))


@pytest.fixture(scope="module")
def ctx(tiny: jepa.Model) -> jepa.Context:
    return tiny.context(threads=2)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def test_info_and_tokenizer(tiny: jepa.Model) -> None:
    i = tiny.info
    assert (i.family, i.modality, i.max_seq_len, i.n_positions, i.pos_offset, i.max_tokens) == (
        "bert",
        "text",
        24,
        66,
        0,
        66,
    )
    assert i.pooling == jepa.Pooling.MEAN and i.text_normalize
    assert tiny.is_text
    t = tiny.tokenizer.encode(["hello world"])[0]
    assert t.ids[0] == 2 and t.ids[-1] == 3 and not t.truncated  # [CLS] ... [SEP]


def test_truncation_is_counted(tiny: jepa.Model) -> None:
    long = " ".join(["seven"] * 40)
    t = tiny.tokenizer.encode([long, "cat"])
    assert len(t[0]) == 24 and t[0].truncated and t[0].ids[-1] == 3
    assert not t[1].truncated


def test_a_text_is_the_same_bits_alone_and_in_any_batch(ctx: jepa.Context) -> None:
    alone = np.concatenate([embed_text(ctx, [s]) for s in SENTENCES])
    together = embed_text(ctx, SENTENCES)
    assert np.array_equal(bits(alone), bits(together))
    for budget in (1, 7, 30, 100000):  # one text per call ... all in one call
        assert np.array_equal(bits(embed_text(ctx, SENTENCES, token_budget=budget)), bits(alone))
    assert np.array_equal(bits(jepa.embed(ctx, SENTENCES)), bits(together))  # the one pipeline entry
    shuffled = [SENTENCES[i] for i in (3, 0, 6, 2, 5, 1, 4)]
    again = embed_text(ctx, shuffled)
    assert np.array_equal(bits(again), bits(together[[3, 0, 6, 2, 5, 1, 4]]))
    # Every token's state too (pool none), and across thread counts.
    seqs = ctx.model.tokenizer.encode(SENTENCES)
    all_tok = ctx.encode_text(seqs, pool=jepa.Pooling.NONE)
    one = np.concatenate([ctx.encode_text([s], pool=jepa.Pooling.NONE) for s in seqs])
    assert np.array_equal(bits(all_tok), bits(one))
    c4 = ctx.model.context(threads=3, max_batch=2)  # 3 threads, graphs of 2 texts
    assert np.array_equal(bits(c4.encode_text(seqs, pool=jepa.Pooling.NONE)), bits(all_tok))


@pytest.mark.parity
@pytest.mark.parametrize("pool", list(TEXT_POOL_MODES))
@pytest.mark.parametrize("normalize", [False, True])
def test_pooling_against_numpy(ctx: jepa.Context, pool: str, normalize: bool) -> None:
    seqs = ctx.model.tokenizer.encode(SENTENCES)
    tokens = ctx.encode_text(seqs, pool=jepa.Pooling.NONE)
    got = encode_tokens(ctx, seqs, pool=pool, normalize=normalize)
    start = 0
    for i, s in enumerate(seqs):
        rows = tokens[start : start + len(s)].astype(np.float64)
        start += len(s)
        want = {"cls": rows[0], "mean": rows.mean(0), "last_token": rows[-1]}[pool]
        if normalize:
            want = want / np.linalg.norm(want)
        np.testing.assert_allclose(got[i], want, rtol=0, atol=1e-6)


def test_token_types_and_ids_input(ctx: jepa.Context) -> None:
    seqs = ctx.model.tokenizer.encode(["hello world"])
    t1 = Tokens(seqs[0].ids, np.ones_like(seqs[0].type_ids))
    a, b = ctx.encode_text(seqs), ctx.encode_text([t1])
    assert not np.array_equal(a, b)  # the token-type table is used
    ids = tokens_from_ids([seqs[0].ids.tolist()], ctx.model)
    assert np.array_equal(bits(ctx.encode_text(ids)), bits(a))


def test_ids_must_be_the_models_own_unpadded(tiny: jepa.Model) -> None:
    # The frame of the tiny WordPiece tokenizer: [CLS]=2 ... [SEP]=3, [PAD]=0.
    frame = tiny.tokenizer.framing
    assert (frame.prefix, frame.suffix, frame.pad) == ((2,), (3,), 0)
    own = [t.ids.tolist() for t in tiny.tokenizer.encode(SENTENCES)]
    got = tokens_from_ids(own, tiny)
    assert [g.ids.tolist() for g in got] == own
    padded = own[0] + [0] * 4  # a fixed-width batch from the model's own tokenizer
    with pytest.raises(jepa.InvalidInputError, match=f"pad id 0 at position {len(own[0])}: send each text's"):
        tokens_from_ids([padded], tiny)
    for bare in (own[0][1:-1], own[0][:-1], own[0][1:], [2, 3]):  # no frame, half a frame, no text
        with pytest.raises(jepa.InvalidInputError, match=r"starting with \[2\] and ending with \[3\]"):
            tokens_from_ids([bare], tiny)
    # Issue 36, L17: the frame's tokens inside it (two texts run together, a stray [CLS]) were taken.
    joined = own[0][:-1] + own[1]  # [CLS] a [CLS] b [SEP]
    run_on = own[0] + own[1][1:]  # [CLS] a [SEP] b [SEP]
    for ids, pos, tok in ((joined, len(own[0]) - 1, 2), (run_on, len(own[0]) - 1, 3)):
        with pytest.raises(jepa.InvalidInputError, match=f"token id {tok} at position {pos} is one of"):
            tokens_from_ids([ids], tiny)


def test_token_batches_are_length_ordered_and_within_budget() -> None:
    lengths = [5, 1, 9, 3, 3, 20, 2]
    batches = token_batches(lengths, budget=10, max_items=3)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[i] for i in flat] == sorted(lengths)
    for b in batches:
        assert len(b) <= 3
        assert sum(lengths[i] for i in b) <= 10 or len(b) == 1


def test_refusals(tiny: jepa.Model, ctx: jepa.Context) -> None:
    with pytest.raises(jepa.InvalidInputError, match=r"'input\[1\]' is an empty string"):
        embed_text(ctx, ["a", ""])
    with pytest.raises(jepa.InvalidInputError, match="over the limit of 100 per text"):
        embed_text(ctx, ["x" * 101], max_chars=100)
    with pytest.raises(jepa.InvalidInputError, match="lone surrogate"):
        embed_text(ctx, ["bad \ud800 text"])
    with pytest.raises(jepa.InvalidInputError, match="expected a string"):
        embed_text(ctx, [b"bytes"])  # type: ignore[list-item]
    with pytest.raises(jepa.InvalidInputError, match="wrap it in a list"):
        embed_text(ctx, "one string")
    with pytest.raises(jepa.InvalidInputError, match=r"token id 999 at position 1 is outside this model's "
                       r"vocabulary \(ids 0..198\)"):
        tokens_from_ids([[2, 999, 3]], tiny)
    with pytest.raises(jepa.InvalidInputError, match="over the model's max_seq_len of 24"):
        tokens_from_ids([[5] * 25], tiny)
    # Past int64: a fuzz finding.
    with pytest.raises(jepa.InvalidInputError, match="outside this model's vocabulary"):
        tokens_from_ids([[2**80, 3]], tiny)
    with pytest.raises(jepa.InvalidInputError, match="empty list of token ids"):
        tokens_from_ids([[]], tiny)
    # The engine's own checks, for callers of Context.encode_text.
    with pytest.raises(jepa.InvalidInputError, match="token id 199 at token 1") as e:
        ctx.encode_text([Tokens(np.array([2, 199], np.int32), np.zeros(2, np.int32))])
    assert e.value.param == "ids"
    with pytest.raises(jepa.InvalidInputError, match="token type id 2") as e:
        ctx.encode_text([Tokens(np.array([2, 3], np.int32), np.array([0, 2], np.int32))])
    assert e.value.param == "type_ids"
    with pytest.raises(jepa.InvalidInputError, match="a sequence takes 1 to 66") as e:
        ctx.encode_text([Tokens(np.full(67, 5, np.int32), np.zeros(67, np.int32))])
    assert e.value.param == "seq_len"
    with pytest.raises(jepa.UnsupportedError, match="text model"):
        ctx.encode(np.zeros((1, 3, 8, 8), np.float32))
    # Even an empty pixel array (a text model's "native shape" has no pixels): refused, never a
    # silent empty answer; the servers' smoke test encodes text (workers.smoke_call).
    info = tiny.info
    empty = np.zeros((1, info.in_chans, max(1, info.n_frames), info.img_size, info.img_size), np.float32)
    with pytest.raises(jepa.UnsupportedError, match="text model"):
        ctx.encode(empty)


def test_modalities_are_not_mixed(tiny_vit_path: str) -> None:
    demo_model = jepa.Model(tiny_vit_path)
    with pytest.raises(jepa.UnsupportedError, match="image model: it takes image inputs, not text"):
        _ = demo_model.tokenizer
    with pytest.raises(jepa.UnsupportedError, match="not a text model"):
        demo_model.context().encode_text([Tokens(np.array([1], np.int32), np.zeros(1, np.int32))])


def test_a_malformed_tokenizer_is_a_model_file_error(tmp_path: Path) -> None:
    bad = write_random_bert(tmp_path / "bad.gguf", tokenizer='{"model": "not a tokenizer"}')
    with pytest.raises(jepa.ModelFileError, match=r"jepa\.text\.tokenizer: HF tokenizers cannot read it"):
        _ = jepa.Model(bad).tokenizer
    doc = json.loads(tiny_tokenizer_json())
    doc["model"]["vocab"]["zebra"] = 10_000  # an id past text.tok_embed
    odd = write_random_bert(tmp_path / "odd.gguf", tokenizer=json.dumps(doc))
    with pytest.raises(jepa.ModelFileError, match="emits token ids up to 10000, past the"):
        _ = jepa.Model(odd).tokenizer  # at load, not when a text meets the id


def test_the_loader_checks_the_text_keys(tmp_path: Path) -> None:
    with pytest.raises(jepa.ModelFileError, match=r"expected a tokenizer\.json object"):
        jepa.Model(write_random_bert(tmp_path / "a.gguf", tokenizer="not json"))
    with pytest.raises(ValueError, match="the position table takes 64 tokens"):
        write_random_bert(tmp_path / "b.gguf", n_positions=66, pos_offset=2, max_seq_len=65)


def test_half_files_keep_the_class(tmp_path: Path) -> None:
    f32 = jepa.Model(write_random_bert(tmp_path / "f.gguf", seed=3)).context(threads=2)
    for ftype in ("f16", "bf16"):
        half = jepa.Model(write_random_bert(tmp_path / f"{ftype}.gguf", seed=3, ftype=ftype)).context(
            threads=2
        )
        a, b = embed_text(f32, SENTENCES), embed_text(half, SENTENCES)
        assert (a * b).sum(1).min() >= 0.999, ftype
        alone = np.concatenate([embed_text(half, [s]) for s in SENTENCES])
        assert np.array_equal(bits(alone), bits(b)), ftype


def test_ggml_attention_path(tiny: jepa.Model) -> None:
    """flash_attn=False: ggml's matmul + softmax + matmul on each sequence's rows, the path a GPU
    takes (custom ops do not run there), against the engine's per-sequence kernel."""
    seqs = tiny.tokenizer.encode(SENTENCES)
    kernel = tiny.context(threads=2).encode_text(seqs, pool=jepa.Pooling.NONE)
    plain = tiny.context(threads=2, flash_attn=False).encode_text(seqs, pool=jepa.Pooling.NONE)
    np.testing.assert_allclose(plain, kernel, rtol=0, atol=1e-5)
