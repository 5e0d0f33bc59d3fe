"""A text model's tokenizer under hostile files and inputs, through the server: a tokenizer.json
that does not fit its file fails the load (503 model_load_failed with the reason), not each request
with a 500; a tokenizer that panics answers in the envelope; one 1 M-character request, and six at
once, stay within a bound of the server's memory while /metrics keeps answering."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_server_support import assert_envelope, http, in_process, run, server_process

from jepa.testing.random_text import tiny_tokenizer_json, tiny_vocab_size, with_split_regex, write_random_bert

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


def test_a_panic_on_a_request_logs_a_line_not_a_backtrace(tmp_path: Path) -> None:
    """Issue 36, L21: under RUST_BACKTRACE=1 each panicking request logged Rust's 73-line backtrace."""
    path = _panicking(tmp_path / "xq.gguf", PANICS_ON_XQ)
    server = server_process("-m", path, "--port", "0", env={"RUST_BACKTRACE": "1"})
    with server as s:
        for _ in range(3):
            reply = http(s.url + "/v1/embeddings", "POST", {"input": ["xq" + "z" * 40]})
            assert assert_envelope(reply, 503)["code"] == "tokenizer_failed"
        proc = s
    err = proc.stop()
    assert "stack backtrace" not in err, err[-2000:]
    assert len(err.splitlines()) < 40, err[-2000:]


# -- memory: a long text is tokenized in bounded pieces, off the default executor -----------------


def _vm(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":")
            out[key] = int(value.split()[0]) / 1024
    return out


def _reset_peak(pid: int) -> None:
    """VmHWM back to VmRSS (Linux's clear_refs 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


PROSE = ("the quick brown fox jumps over the lazy dog, a photo of a cat " * 16_000)[:1_000_000]


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux /proc")
def test_a_million_characters_stay_within_a_memory_bound(tmp_path: Path) -> None:
    path = write_random_bert(tmp_path / "bert.gguf", max_seq_len=64)
    # The default --max-request-chars (1 M): one text of 1 M characters is a valid request.
    with server_process("-m", path, "--port", "0") as server:
        pid = server.proc.pid  # type: ignore[union-attr]
        url = server.url + "/v1/embeddings"
        assert http(url, "POST", {"input": ["warm up"]}).status == 200
        base = _vm(pid)["VmRSS"]
        _reset_peak(pid)
        one = http(url, "POST", {"input": [PROSE]}).json()
        assert one["usage"] == {"prompt_tokens": 64, "total_tokens": 64, "truncated_inputs": 1}
        peak_one = _vm(pid)["VmHWM"] - base
        # Six at once, /metrics asked meanwhile. Before: tokenized whole on asyncio's default
        # executor: +168 MiB for one, +947 MiB peak and +716 MiB kept for six, /metrics 5.1 s.
        waits: list[float] = []
        done = threading.Event()

        def metrics() -> None:
            while True:
                t0 = time.perf_counter()
                assert http(server.url + "/metrics").status == 200
                waits.append(time.perf_counter() - t0)
                if done.is_set():
                    return
                time.sleep(0.01)

        poller = threading.Thread(target=metrics)
        poller.start()
        with ThreadPoolExecutor(6) as pool:
            statuses = list(pool.map(lambda _: http(url, "POST", {"input": [PROSE]}).status, range(6)))
        done.set()
        poller.join()
        after = _vm(pid)
        assert statuses == [200] * 6
        # Measured: +5 MiB for one, +13 MiB peak and +2 MiB kept for six, /metrics within 25 ms.
        assert peak_one < 48, peak_one
        assert after["VmHWM"] - base < 64, after
        assert after["VmRSS"] - base < 32, after
        assert max(waits) < 1.0, waits


def test_the_tokenizer_gate_holds_characters_server_wide() -> None:
    from jepa_server.tokenizing import TokenizerGate

    class Prep:
        def __init__(self) -> None:
            self.pool = ThreadPoolExecutor(4)

        def submit(self, fn: object, *args: object) -> object:
            return self.pool.submit(fn, *args)  # type: ignore[arg-type]

    lock = threading.Lock()
    held = [0, 0]  # characters in fn now, the most at once

    def work(chars: int) -> int:
        with lock:
            held[0] += chars
            held[1] = max(held[1], held[0])
        time.sleep(0.05)
        with lock:
            held[0] -= chars
        return chars

    async def body() -> None:
        gate, prep = TokenizerGate(100), Prep()
        # Small groups overlap up to the gate; ...
        got = await asyncio.gather(*(gate.run(prep, 40, work, 40) for _ in range(6)))
        assert got == [40] * 6 and held[1] == 80
        # ... a group larger than the gate runs alone (it holds all of it), in arrival order.
        held[1] = 0
        await asyncio.gather(gate.run(prep, 30, work, 30), gate.run(prep, 10**6, work, 100),
                             gate.run(prep, 30, work, 30))
        assert held[1] == 100
        # A cancelled caller gives its share back once its work has ended, not before.
        task = asyncio.ensure_future(gate.run(prep, 100, work, 100))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert gate.free == 0
        await asyncio.sleep(0.1)
        assert gate.free == 100 and held[0] == 0
        prep.pool.shutdown()

    run(body)
