"""A text model's tokenizer under hostile files and inputs, through the server: a tokenizer.json
that does not fit its file fails the load (503 model_load_failed with the reason), not each request
with a 500; a tokenizer that panics answers in the envelope; one 1 M-character request, and six at
once, stay within a bound of the server's memory while /metrics keeps answering."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_server_support import assert_envelope, http, in_process, run, server_process

from jepa.convert.random_text import tiny_tokenizer_json, tiny_vocab_size, with_split_regex, write_random_bert

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


# tests/test_text_tokenizer.py's regexes: a panic on a run of 'a' (the load check meets it), and on
# 'xq' then a run of 'z' (only a request does).
PANICS_ON_A_RUN = "(a+)+b"
PANICS_ON_XQ = "xq(z+z+)+!"
# Rust prints each panic to stderr, with RUST_BACKTRACE=1 a whole backtrace: a server that has not
# printed its startup line yet would block on a full stderr pipe (the harness reads stdout).
QUIET_PANICS = {"RUST_BACKTRACE": "0"}


def _panicking(path: Path, pattern: str) -> str:
    return write_random_bert(path, tokenizer=with_split_regex(tiny_tokenizer_json(), pattern))


def test_a_tokenizer_that_panics_fails_the_load(tmp_path: Path) -> None:
    path = _panicking(tmp_path / "hostile.gguf", PANICS_ON_A_RUN)
    # -m: the server does not start (before: /health said ok and "aaa..." closed the connection).
    started = server_process("-m", path, "--port", "0", env=QUIET_PANICS)
    why = r"(?s)did not start.*HF tokenizers failed \(a Rust panic"
    with pytest.raises(RuntimeError, match=why), started:
        pass

    async def body() -> None:  # from a models directory: the load's 503, with the reason
        async with in_process(models_dir=str(tmp_path)) as (client, _):
            r = await client.post("/v1/embeddings", json={"model": "hostile", "input": ["a" * 64]})
            err = (await r.json())["error"]
            assert (r.status, err["code"]) == (503, "model_load_failed"), err
            assert "jepa.text.tokenizer: HF tokenizers failed" in err["message"]

    run(body)


def test_a_panic_on_a_request_is_answered_in_the_envelope(tmp_path: Path) -> None:
    path = _panicking(tmp_path / "xq.gguf", PANICS_ON_XQ)
    with server_process("-m", path, "--port", "0", env=QUIET_PANICS) as server:
        reply = http(server.url + "/v1/embeddings", "POST", {"input": ["fine", "xq" + "z" * 40]})
        err = assert_envelope(reply, 503)
        assert err["code"] == "tokenizer_failed" and err["param"] == "input"
        assert "the model's tokenizer failed" in err["message"] and "retry-limit" in err["message"]
        assert "retry-after" not in reply.headers  # the same text fails again: nothing to wait for
        assert http(server.url + "/health").status == 200
        assert http(server.url + "/v1/embeddings", "POST", {"input": ["the lazy dog"]}).status == 200
