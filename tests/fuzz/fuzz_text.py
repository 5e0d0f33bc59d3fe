"""atheris target: bytes -> a text model's request parsing and tokenization, called directly (no
network): the JSON body (inputs.parse_body), `input` as the four OpenAI forms (inputs.parse_texts
with small budgets), then the model's own tokenizer (jepa.text.TextTokenizer.encode) or token-id
checking (jepa.text.tokens_from_ids), and the engine's encode of what passed. Only ApiError and
jepa's errors may escape.

The first byte's top bit picks the form of the rest: raw bytes as the body, or a body built from the
bytes (atheris.FuzzedDataProvider): strings of every kind (empty, huge, lone surrogates, control
characters, other scripts), integers of every size, nested arrays and objects.

    python tests/fuzz/fuzz_text.py -max_total_time=60 -dict=tests/fuzz/text.dict \\
        /tmp/text-work tests/fuzz/corpus/text        # docs/fuzzing.md
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import atheris
from harness import instrument, run

import jepa
import jepa.text
from jepa.testing.random_text import write_random_bert
from jepa_server import inputs
from jepa_server.errors import ApiError

_DIR = Path(tempfile.mkdtemp(prefix="jepa-fuzz-text-"))
MODEL = jepa.Model(write_random_bert(_DIR / "t.gguf", max_seq_len=32))
CTX = MODEL.context(threads=1)
# Token ids accepted: the id checks (vocabulary, frame, padding) are what this target fuzzes past the parser.
LIMITS = inputs.Limits(max_items=16, max_frames=1, max_chars=4096, max_tokens=256, accept_token_ids=True)
instrument("jepa_server", "jepa")


def _value(fdp: atheris.FuzzedDataProvider, depth: int) -> Any:
    kind = fdp.ConsumeIntInRange(0, 7 if depth < 3 else 4)
    if kind == 0:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 64))
    if kind == 1:
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 64))  # surrogates too
    if kind == 2:
        return fdp.ConsumeIntInRange(-(2**40), 2**40)
    if kind == 3:
        return fdp.ConsumeIntInRange(0, 300)  # around the tiny vocabulary's size
    if kind == 4:
        return fdp.PickValueInList([None, True, 1.5, "", "a" * 5000, "hello world"])
    if kind == 5:
        return [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 8))]
    if kind == 6:
        return [fdp.ConsumeIntInRange(0, 250) for _ in range(fdp.ConsumeIntInRange(0, 40))]
    n = fdp.ConsumeIntInRange(0, 3)
    return {fdp.ConsumeUnicodeNoSurrogates(6): _value(fdp, depth + 1) for _ in range(n)}


def one_input(data: bytes) -> None:
    if not data:
        return
    if data[0] & 0x80:
        body = inputs.parse_body(data[1:], max_values=4096)
    else:
        fdp = atheris.FuzzedDataProvider(data[1:])
        body = {"input": _value(fdp, 0)}
    got = inputs.parse_texts(MODEL, body.get("input"), "input", LIMITS)
    if got.texts is not None:
        seqs = MODEL.tokenizer.encode(got.texts, max_chars=LIMITS.max_chars)
    else:
        seqs = jepa.text.tokens_from_ids(got.ids or [], MODEL)
    if sum(len(s) for s in seqs) <= LIMITS.max_tokens:
        v = jepa.text.encode_tokens(CTX, seqs)
        assert v.shape == (len(seqs), MODEL.embed_dim)


if __name__ == "__main__":
    run(one_input, (ApiError, jepa.JepaError))
