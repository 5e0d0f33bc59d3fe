"""Text encoders against transformers: tiny random BertModel and XLMRobertaModel (built here, LayerNorms
randomised, both token types, sequences up to max_seq_len) converted from save_pretrained directories,
every token's final hidden state compared with the model's own, plus the converter's refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf_doc import check_file_against_doc

import jepa
from jepa import Pooling
from jepa.convert import convert
from jepa.testing.random_text import tiny_tokenizer_json, tiny_vocab_size, write_st_layout
from jepa.text import Tokens

pytestmark = [pytest.mark.transformers, pytest.mark.torch, pytest.mark.every_path]


# Not tools/bench/text.py's smoke_model: that is a sentence-transformers directory sized for speed; this
# one is bare save_pretrained, BERT or XLM-R, with randomised LayerNorms and room for long sequences.
def _save(kind: str, tmp: Path, seed: int = 0, **cfg: Any) -> tuple[Path, Any]:
    import torch
    from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel

    from conftest import randomise_norms

    vocab = tiny_vocab_size()
    base = dict(
        vocab_size=vocab,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(seed)
    if kind == "bert":
        model = BertModel(
            BertConfig(**{**base, "max_position_embeddings": 130, "type_vocab_size": 2, **cfg}),
            add_pooling_layer=True,
        )
    else:
        model = XLMRobertaModel(
            XLMRobertaConfig(
                **{**base, "max_position_embeddings": 130, "type_vocab_size": 1, "pad_token_id": 1, **cfg}
            ),
            add_pooling_layer=False,
        )
    randomise_norms(model, torch.Generator().manual_seed(seed + 1))
    model.eval()
    src = tmp / kind
    model.save_pretrained(src)
    (src / "tokenizer.json").write_text(tiny_tokenizer_json())
    return src, model


def _hf_states(model: Any, ids: np.ndarray, types: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = model(
            input_ids=torch.from_numpy(ids[None].astype(np.int64)),
            token_type_ids=torch.from_numpy(types[None].astype(np.int64)),
        )
    return out.last_hidden_state[0].numpy()


@pytest.mark.parametrize("kind", ["bert", "xlmr"])
def test_every_token_matches_transformers(kind: str, tmp_path: Path) -> None:
    cfg = {"hidden_act": "gelu_new", "layer_norm_eps": 1e-7} if kind == "bert" else {}
    src, model = _save(kind, tmp_path, **cfg)
    path = convert(src, tmp_path / f"{kind}.gguf", pooling="mean")
    m = jepa.Model(path)
    info = m.info
    pos_offset = 0 if kind == "bert" else 2
    assert (info.pos_offset, info.n_positions, info.max_tokens) == (pos_offset, 130, 130 - pos_offset)
    assert info.max_seq_len == 130 - pos_offset
    ctx = m.context(threads=2)
    rng = np.random.default_rng(0)
    n_types = 2 if kind == "bert" else 1
    seqs = []
    for n in (1, 2, 5, 17, 40, 64, info.max_tokens):  # up to the longest the position table takes
        ids = rng.integers(2, info.vocab_size, n).astype(np.int32)  # never XLM-R's pad id 1
        seqs.append(Tokens(ids, rng.integers(0, n_types, n).astype(np.int32)))
    got = ctx.encode_text(seqs, pool=Pooling.NONE)
    start = 0
    for s in seqs:
        want = _hf_states(model, s.ids, s.type_ids)
        np.testing.assert_allclose(
            got[start : start + len(s)], want, rtol=0, atol=3e-5, err_msg=f"{kind} n={len(s)}"
        )
        start += len(s)
    alone = np.concatenate([ctx.encode_text([s], pool=Pooling.NONE) for s in seqs])
    assert np.array_equal(alone.view(np.uint32), got.view(np.uint32))


def test_conversion_keys_and_refusals(tmp_path: Path, gguf_contents: Any) -> None:
    src, _ = _save("bert", tmp_path)
    with pytest.raises(ValueError, match=r"does not say how it pools.*--pooling"):
        convert(src, tmp_path / "a.gguf")
    g = gguf_contents(convert(src, tmp_path / "b.gguf", pooling="cls", normalize=True, max_seq_len=32))
    k = g.keys
    assert (k["jepa.family"], k["jepa.modality"], k["jepa.text.pooling"], k["jepa.text.normalize"]) == (
        "bert",
        "text",
        "cls",
        True,
    )
    assert (k["jepa.text.max_seq_len"], k["jepa.text.pos_offset"], k["jepa.text.layout"]) == (
        32,
        0,
        "BertModel",
    )
    tok = json.loads(k["jepa.text.tokenizer"])
    assert tok["padding"] is None and tok["truncation"] is None
    assert "jepa.pre.crop" not in k and "jepa.enc.patch_size" not in k
    check_file_against_doc(k, g.arrays, {"every file", "family bert"}, "Text encoder", ("text.",))
    with pytest.raises(ValueError, match="position table takes 130"):
        convert(src, tmp_path / "c.gguf", pooling="cls", max_seq_len=131)
    (src / "tokenizer.json").write_text("{oops")
    with pytest.raises(ValueError):
        convert(src, tmp_path / "d.gguf", pooling="cls")
    (src / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match=r"no tokenizer\.json"):
        convert(src, tmp_path / "e.gguf", pooling="cls")
    assert not (tmp_path / "d.gguf").exists() and not (tmp_path / "e.gguf").exists()


def _st_dir(tmp_path: Path, pooling: dict[str, Any], normalize: bool) -> Path:
    src, _ = _save("bert", tmp_path)
    write_st_layout(src, 48, pooling, normalize, max_seq_length=40)
    return src


@pytest.mark.parametrize(
    ("flags", "pooling"),
    [
        ({"pooling_mode_cls_token": True}, "cls"),
        ({"pooling_mode_mean_tokens": True}, "mean"),
        ({"pooling_mode_lasttoken": True}, "last_token"),
    ],
)
def test_sentence_transformers_directories(
    flags: dict[str, Any], pooling: str, tmp_path: Path, gguf_contents: Any
) -> None:
    k = gguf_contents(convert(_st_dir(tmp_path, flags, True), tmp_path / "m.gguf")).keys
    assert (k["jepa.text.pooling"], k["jepa.text.normalize"], k["jepa.text.max_seq_len"]) == (
        pooling,
        True,
        40,
    )


def test_unsupported_sentence_transformers_pooling(tmp_path: Path) -> None:
    src = _st_dir(tmp_path, {"pooling_mode_max_tokens": True}, False)
    with pytest.raises(ValueError, match="unsupported pooling pooling_mode_max_tokens"):
        convert(src, tmp_path / "m.gguf")
    # --pooling overrides what the directory says.
    assert convert(src, tmp_path / "m.gguf", pooling="mean")
