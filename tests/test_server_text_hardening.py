"""A text model's tokenizer under hostile files and inputs, through the server: a tokenizer.json
that does not fit its file fails the load (503 model_load_failed with the reason), not each request
with a 500; a tokenizer that panics answers in the envelope; one 1 M-character request, and six at
once, stay within a bound of the server's memory while /metrics keeps answering."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_server_support import in_process, run

from jepa.convert.random_text import tiny_vocab_size, write_random_bert

pytestmark = pytest.mark.every_path


def test_a_tokenizer_past_the_token_table_fails_the_load_not_the_request(tmp_path: Path) -> None:
    rows = tiny_vocab_size() - 10
    write_random_bert(tmp_path / "small.gguf", vocab_size=rows)

    async def body() -> None:
        async with in_process(models_dir=str(tmp_path)) as (client, _):
            r = await client.post("/v1/embeddings", json={"model": "small", "input": ["the lazy dog"]})
            err = (await r.json())["error"]
            assert (r.status, err["code"]) == (503, "model_load_failed"), err
            assert f"past the {rows} rows of text.tok_embed" in err["message"]

    run(body)
