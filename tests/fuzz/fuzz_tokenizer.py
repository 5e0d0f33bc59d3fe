"""atheris target: bytes -> a text model's tokenizer.json (the jepa.text.tokenizer key a GGUF carries,
read by jepa.tokenizer.TextTokenizer) and texts through it. The tiny WordPiece tokenizer's JSON with any of
its parts (normalizer, pre_tokenizer, model, post_processor, added_tokens, truncation, padding, ...)
replaced by a fuzzed value, a Split / Replace pattern of fuzzed regex text, or raw bytes as the whole
file. Loading and encoding may refuse (jepa.JepaError: a ModelFileError naming the key); a panic inside
HF tokenizers (pyo3's PanicException, a BaseException), any other exception, a hang or ids past the
model's vocabulary are findings.

    python tests/fuzz/fuzz_tokenizer.py -max_total_time=60 -dict=tests/fuzz/tokenizer.dict \\
        /tmp/tokenizer-work tests/fuzz/corpus/tokenizer        # docs/fuzzing.md
"""

from __future__ import annotations

import json
from typing import Any

import atheris
from harness import instrument, run

import jepa
import jepa.tokenizer
from jepa.testing.random_text import tiny_tokenizer_json, tiny_vocab_size

BASE = json.loads(tiny_tokenizer_json())
VOCAB = tiny_vocab_size()
PARTS = [
    "normalizer",
    "pre_tokenizer",
    "model",
    "post_processor",
    "decoder",
    "added_tokens",
    "truncation",
    "padding",
]
instrument("jepa")


def _value(fdp: atheris.FuzzedDataProvider, depth: int = 0) -> Any:
    kind = fdp.ConsumeIntInRange(0, 8 if depth < 3 else 5)
    if kind == 0:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 24))
    if kind == 1:
        return fdp.ConsumeIntInRange(-(2**40), 2**40)
    if kind == 2:
        return fdp.PickValueInList([None, True, False, 0, -1, 1.5, "", "[UNK]", "[CLS]", "##"])
    if kind == 3:  # a regex-bearing pre-tokenizer or normalizer
        pattern = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 24))
        return fdp.PickValueInList(
            [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                {"type": "Replace", "pattern": {"Regex": pattern}, "content": "x"},
            ]
        )
    if kind == 4:
        return fdp.PickValueInList(
            [
                {"type": "BertPreTokenizer"},
                {"type": "Whitespace"},
                {"type": "ByteLevel"},
                {"type": "Metaspace"},
                {"type": "BertNormalizer"},
                {"type": "NFKC"},
                {"type": "Lowercase"},
                {"type": "Sequence"},
            ]
        )
    if kind == 5:
        return {"type": fdp.ConsumeUnicodeNoSurrogates(12)}
    if kind == 6:
        return [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))]
    if kind == 7:
        return {
            fdp.ConsumeUnicodeNoSurrogates(8): _value(fdp, depth + 1)
            for _ in range(fdp.ConsumeIntInRange(0, 3))
        }
    return {
        "type": "Sequence",
        "pretokenizers": [_value(fdp, depth + 1)],
        "normalizers": [_value(fdp, depth + 1)],
    }


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeIntInRange(0, 7) == 0:
        text = fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 2000))
    else:
        tok = json.loads(json.dumps(BASE))
        for _ in range(fdp.ConsumeIntInRange(1, 3)):
            part = fdp.PickValueInList(PARTS)
            if part == "model" and fdp.ConsumeBool():
                model = dict(tok["model"]) if isinstance(tok.get("model"), dict) else {}
                model[fdp.PickValueInList(["vocab", "unk_token", "max_input_chars_per_word", "type"])] = (
                    _value(fdp)
                )
                tok["model"] = model
            else:
                tok[part] = _value(fdp)
        text = json.dumps(tok)
    texts = [fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(1, 200)) or "a" for _ in range(2)]
    tokenizer = jepa.tokenizer.TextTokenizer(text, 32, VOCAB)
    for t in tokenizer.encode(texts):
        assert len(t) <= 32 and t.ids.shape == t.type_ids.shape
        assert not t.ids.size or (int(t.ids.min()) >= 0 and int(t.ids.max()) < VOCAB), t.ids


if __name__ == "__main__":
    run(one_input, (jepa.JepaError,))
