"""The model registry under stress (issue 21, "Hardening, round two"): an engine is referenced before
it can be chosen for eviction; --max-loaded-models serves every model in turn; a failed load backs
off; the models directory is read off the event loop, from regular files only, and a file name
that cannot be served (not UTF-8, unprintable, an empty stem) is skipped and logged escaped; a
load failure names the model, never its directory; a client's `keep_alive` is its own, bounded.

Registry tests run its real code with the loader seam of test_server_registry; the app tests go
through HTTP to real tiny models."""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_server_registry import FakeEngine, Loader, _registry, _use
from test_server_support import image_item, in_process, metric, run

from jepa_server import registry as registry_mod
from jepa_server.catalog import Catalog
from jepa_server.errors import ApiError
from jepa_server.keys import RUNTIME
from jepa_server.registry import Registry


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tiny ViTs and a tiny BERT: the three kinds of engine a request can be handed."""
    from jepa.demo import write_demo_model
    from jepa.testing.random_text import write_random_bert

    d = tmp_path_factory.mktemp("hardening")
    write_demo_model(d / "alpha.gguf", embed_dim=64, n_layer=2, n_head=2, img_size=32, seed=1)
    write_demo_model(d / "beta.gguf", embed_dim=96, n_layer=2, n_head=2, img_size=32, seed=2)
    write_random_bert(d / "text.gguf")
    return d


def _linked(tmp_path: Path, models_dir: Path, *names: str) -> Path:
    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    for n in names:
        (d / f"{n}.gguf").symlink_to(models_dir / f"{n}.gguf")
    return d


async def _post(client: Any, body: dict[str, Any]) -> tuple[int, dict[str, Any], Any]:
    headers = {"Content-Type": "application/json"}
    r = await client.post("/v1/embeddings", data=json.dumps(body), headers=headers)
    return r.status, await r.json(), r.headers


def _input(model: str, i: int) -> dict[str, Any]:
    return {"model": model, "input": ["a photo of a cat"] if model == "text" else image_item(i)}


# ---- H4: a request is never handed an engine that was just unloaded ------------------------------


def test_a_model_just_loaded_is_not_evicted_before_its_waiters_use_it(models_dir: Path) -> None:
    """At --max-loaded-models 1, a request for another model that arrives between alpha's load
    finishing and alpha's waiters resuming used to evict alpha (nobody held a reference yet): the
    waiters then got a closed engine. The waiters' references are taken when the load completes."""

    async def body() -> None:
        loader = Loader(delay=0.02)
        reg = _registry(models_dir, loader, max_loaded=1)
        handed: list[tuple[FakeEngine, bool]] = []
        late: list[asyncio.Task[FakeEngine]] = []

        async def use_alpha() -> None:
            async with reg.use("alpha") as engine:
                handed.append((engine, engine.closed))
                await asyncio.sleep(0.01)

        def on_event(kind: str, model: str, seconds: float) -> None:
            if kind == "loaded" and model == "alpha":  # alpha is resident; its waiters not yet resumed
                late.append(asyncio.create_task(_use(reg, "beta")))

        reg._on_event = on_event
        await asyncio.gather(*(use_alpha() for _ in range(4)))
        await asyncio.gather(*late)
        assert len(handed) == 4 and not any(closed for _, closed in handed), handed
        assert loader.started == ["alpha", "beta"]
        await reg.close()

    run(body)


def test_alternating_models_at_the_cap_never_get_an_unloaded_engine(models_dir: Path) -> None:
    """Six clients (two per model: two ViTs and a BERT) alternate requests at --max-loaded-models 1
    for 3 s. Before: 226 false 503 'the server is shutting down' (text) and 491 500s with a traceback
    (images) in 10 s; every answer is now a 200 or a 503 models_busy naming the cap."""

    async def body() -> collections.Counter[tuple[str, int, str]]:
        counts: collections.Counter[tuple[str, int, str]] = collections.Counter()
        async with in_process(models_dir=str(models_dir), max_loaded_models=1, queue_timeout_s=2.0) as (
            client,
            _app,
        ):
            t0 = time.monotonic()

            async def client_loop(c: int) -> None:
                i = c
                while time.monotonic() - t0 < 3.0:
                    model = ("alpha", "text", "beta")[i % 3]
                    status, answer, _ = await _post(client, _input(model, i))
                    code = "" if status == 200 else answer["error"]["code"]
                    counts[(model, status, code)] += 1
                    i += 3 if c >= 3 else 1

            await asyncio.gather(*(client_loop(c) for c in range(6)))
        return counts

    counts = run(body)
    bad = {k: v for k, v in counts.items() if k[1] != 200 and k[2] != "models_busy"}
    assert not bad, counts
    assert all(counts[(m, 200, "")] > 0 for m in ("alpha", "beta", "text")), counts


# ---- L12: one busy model does not starve the others ----------------------------------------------


def test_a_busy_model_does_not_starve_another_at_the_cap(models_dir: Path) -> None:
    """alpha is never idle (overlapping requests); beta waits for the next slot: alpha's new requests
    queue behind it, alpha drains, beta loads and answers, then alpha's turn comes again."""

    async def body() -> None:
        loader = Loader()
        reg = _registry(models_dir, loader, max_loaded=1, slot_wait_s=5.0)
        stop = asyncio.Event()
        served: collections.Counter[str] = collections.Counter()

        async def hammer(model: str) -> None:
            while not stop.is_set():
                await _use(reg, model, hold=0.02)
                served[model] += 1

        alphas = [asyncio.create_task(hammer("alpha")) for _ in range(4)]
        await asyncio.sleep(0.05)
        async with asyncio.timeout(2):
            await _use(reg, "beta")
        served["beta"] += 1
        await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*alphas)
        assert served["beta"] == 1 and served["alpha"] > 4, served
        assert loader.started[:3] == ["alpha", "beta", "alpha"], loader.started
        await reg.close()

    run(body)


def test_two_models_both_make_progress_under_the_cap_over_http(models_dir: Path) -> None:
    """Four clients on alpha, one on beta, --max-loaded-models 1, 3 s. Before: alpha 426 x 200, beta
    0 x 200 (423 x 503 models_busy); now both are served."""

    async def body() -> collections.Counter[tuple[str, int]]:
        counts: collections.Counter[tuple[str, int]] = collections.Counter()
        async with in_process(models_dir=str(models_dir), max_loaded_models=1, queue_timeout_s=2.0) as (
            client,
            _app,
        ):
            t0 = time.monotonic()

            async def client_loop(model: str, seed: int) -> None:
                while time.monotonic() - t0 < 3.0:
                    status, _, _ = await _post(client, _input(model, seed))
                    counts[(model, status)] += 1

            await asyncio.gather(*(client_loop("alpha", i) for i in range(4)), client_loop("beta", 9))
        return counts

    counts = run(body)
    assert counts[("alpha", 200)] > 0 and counts[("beta", 200)] > 0, counts
    assert set(s for _, s in counts) <= {200, 503}, counts


def test_a_slot_wait_past_its_limit_is_503_models_busy(models_dir: Path) -> None:
    async def body() -> None:
        reg = _registry(models_dir, Loader(), max_loaded=1, slot_wait_s=0.05)
        holder = asyncio.create_task(_use(reg, "alpha", hold=0.3))
        await asyncio.sleep(0.02)
        with pytest.raises(ApiError) as err:
            await _use(reg, "beta")
        assert err.value.status == 503 and err.value.code == "models_busy"
        assert err.value.headers.get("Retry-After") == "1"
        await holder
        assert not reg.resident["alpha"].draining  # nobody waits any more: alpha keeps serving
        await _use(reg, "alpha")
        await reg.close()

    run(body)


# ---- L11: a failed load backs off ---------------------------------------------------------------


def test_a_failed_load_is_remembered_and_backs_off(models_dir: Path) -> None:
    """60 requests for a broken file: one load (before: 60), each answer 503 model_load_failed with
    a Retry-After; the backoff doubles on the next failure of the same file; a changed file (mtime,
    size) retries at once."""

    async def body() -> None:
        loader = Loader()
        loader.fail.add("beta")
        reg = _registry(models_dir, loader, load_backoff_s=(0.3, 2.0))
        for _ in range(60):
            with pytest.raises(ApiError) as err:
                await _use(reg, "beta")
            assert err.value.status == 503 and err.value.code == "model_load_failed"
            assert int(err.value.headers["Retry-After"]) >= 1 and "broken on purpose" in err.value.message
        assert loader.started == ["beta"]
        for backoff in (0.3, 0.6):  # each time it has passed: one more try, then twice as long
            await asyncio.sleep(backoff + 0.05)
            for _ in range(2):
                with pytest.raises(ApiError):
                    await _use(reg, "beta")
        assert loader.started == ["beta"] * 3
        loader.fail.clear()
        with pytest.raises(ApiError):  # fixed in the loader, but the file is the same: still backing off
            await _use(reg, "beta")
        path = models_dir / "beta.gguf"
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a changed file
        await _use(reg, "beta")
        assert loader.started == ["beta"] * 4 and "beta" in reg.resident
        await reg.close()

    run(body)


def test_sixty_requests_for_a_broken_file_load_it_once_over_http(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "broken.gguf").write_bytes(b"not a model")

    async def body() -> int:
        async with in_process(models_dir=str(d)) as (client, app):
            for _ in range(60):
                status, answer, headers = await _post(client, {"model": "broken", "input": image_item(1)})
                assert status == 503 and answer["error"]["code"] == "model_load_failed", answer
                assert "Retry-After" in headers
            reg = app[RUNTIME].registry
            assert reg is not None
            return reg.loads

    assert run(body) == 1


# ---- M2: a load failure names the model and the reason, never the directory --------------------


def test_a_load_failure_names_the_id_and_the_reason_not_the_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    real = tmp_path / "private-store"
    real.mkdir()
    (real / "target.gguf").write_bytes(b"hello, not a model")
    d = tmp_path / "m"
    d.mkdir()
    (d / "broken.gguf").symlink_to(real / "target.gguf")
    (d / "plain.gguf").write_bytes(b"GGUF but truncated")

    async def body() -> None:
        async with in_process(models_dir=str(d)) as (client, _app):
            for model in ("broken", "plain"):
                status, answer, _ = await _post(client, {"model": model, "input": image_item(1)})
                message = answer["error"]["message"]
                assert status == 503 and answer["error"]["code"] == "model_load_failed", answer
                assert repr(model) in message and "GGUF" in message, message
                assert str(tmp_path) not in message and "private-store" not in message, message

    with caplog.at_level(logging.ERROR, logger="jepa_server"):
        run(body)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert str(d / "plain.gguf") in logged  # the operator's log keeps the path


# ---- M1 and L3: names that cannot be served ---------------------------------------------------------


def test_a_file_name_that_is_not_utf8_is_not_served_and_metrics_stay_up(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = _linked(tmp_path, models_dir, "alpha")
    os.symlink(os.fsencode(models_dir / "beta.gguf"), os.path.join(os.fsencode(d), b"caf\xe9.gguf"))

    async def body() -> None:
        async with in_process(models_dir=str(d)) as (client, _app):
            status, _, _ = await _post(client, _input("alpha", 1))
            assert status == 200
            status, answer, _ = await _post(client, {"model": "caf\udce9", "input": image_item(1)})
            assert status == 404, answer
            r = await client.get("/metrics")
            assert r.status == 200, await r.text()
            assert metric(await r.text(), "jepa_items_total", {"model": "alpha"}) == 1
            r = await client.get("/v1/models")
            assert [m["id"] for m in (await r.json())["data"]] == ["alpha"]

    with caplog.at_level(logging.WARNING, logger="jepa_server"):
        run(body)
    assert any("caf\\udce9" in r.getMessage() or "caf\\xe9" in r.getMessage() for r in caplog.records)


def test_names_with_newlines_and_an_empty_stem_are_skipped_and_logged_escaped(
    tmp_path: Path, models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file named 'x\\nINFO forged.gguf' used to be served under that id, and its load logged a
    forged line; '.gguf' was served as the id ''. Both are skipped, logged once, escaped."""
    d = _linked(tmp_path, models_dir, "alpha")
    (d / "x\nINFO forged.gguf").symlink_to(models_dir / "beta.gguf")
    (d / ".gguf").symlink_to(models_dir / "beta.gguf")

    async def body() -> None:
        async with in_process(models_dir=str(d)) as (client, _app):
            for name in ("x\nINFO forged", ""):
                status, answer, _ = await _post(client, {"model": name, "input": image_item(1)})
                assert status == 404, answer
            status, _, _ = await _post(client, _input("alpha", 1))
            assert status == 200

    with caplog.at_level(logging.DEBUG, logger="jepa_server"):
        run(body)
    messages = [r.getMessage() for r in caplog.records]
    assert not any("\n" in m for m in messages), [m for m in messages if "\n" in m]
    skipped = [m for m in messages if "not served" in m]
    assert any("'x\\nINFO forged.gguf'" in m for m in skipped), skipped
    assert any("'.gguf'" in m for m in skipped), skipped
    assert len(skipped) == 2  # once each, not on every rescan


def test_a_catalog_of_odd_names_serves_only_the_usable_ones(tmp_path: Path, models_dir: Path) -> None:
    d = _linked(tmp_path, models_dir, "alpha")
    for name in (".gguf", "tab\there.gguf", "bell\x07.gguf"):
        (d / name).symlink_to(models_dir / "beta.gguf")
    c = Catalog((), str(d))
    assert c.ids() == ["alpha"]
    assert sorted(c.skipped) == [".gguf", "bell\x07.gguf", "tab\there.gguf"]


# ---- M6: the models directory is read off the loop, from regular files only, bounded -------------

_READ_CATALOG = """
import sys
from jepa_server.catalog import Catalog, CatalogError
try:
    Catalog((), sys.argv[1])
except CatalogError as exc:
    print("CatalogError:", exc)
else:
    print("served")
"""


def _read_catalog_in_a_child(d: Path) -> str:
    """Read the catalog in a child held to 1 GiB of address space and 20 s (a FIFO that blocks, or
    /dev/zero that reads forever, must not take this process with it)."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    try:
        out = subprocess.run(
            [sys.executable, "-c", _READ_CATALOG, str(d)],
            capture_output=True, text=True, timeout=20, preexec_fn=limit, check=False,
        )
    except subprocess.TimeoutExpired:
        return "timed out"
    return (out.stdout + out.stderr).strip()


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "huge", "directory"])
def test_a_models_toml_that_is_not_a_small_regular_file_is_refused_at_once(
    tmp_path: Path, models_dir: Path, kind: str
) -> None:
    d = _linked(tmp_path, models_dir, "alpha")
    toml = d / "models.toml"
    if kind == "fifo":
        os.mkfifo(toml)
    elif kind == "dev_zero":
        toml.symlink_to("/dev/zero")
    elif kind == "huge":
        toml.write_bytes(b"# padding\n" * 200_000)  # 2 MB of comments
    else:
        toml.mkdir()
    t0 = time.monotonic()
    out = _read_catalog_in_a_child(d)
    assert out.startswith("CatalogError:") and "models.toml" in out, out
    assert ("regular file" in out) if kind != "huge" else ("MiB" in out or "bytes" in out), out
    assert time.monotonic() - t0 < 15


def test_a_rescan_runs_off_the_event_loop(tmp_path: Path, models_dir: Path) -> None:
    """An unknown name rescans the directory; the listing and models.toml are read in a thread, so a
    slow disk never stalls the loop's other requests."""
    d = _linked(tmp_path, models_dir, "alpha")
    threads: list[bool] = []
    real_read = Catalog.read

    def read(self: Catalog) -> Any:
        threads.append(threading.current_thread() is threading.main_thread())
        time.sleep(0.2)
        return real_read(self)

    async def body() -> None:
        reg = Registry(Catalog((), str(d)), Loader(), keep_alive_s=60, max_loaded=0, max_concurrent_loads=1)
        Catalog.read = read  # type: ignore[method-assign]
        registry_mod.RESCAN_EVERY_S, saved = 0.0, registry_mod.RESCAN_EVERY_S
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        t = asyncio.create_task(ticker())
        try:
            with pytest.raises(ApiError):
                await _use(reg, "delta")
        finally:
            Catalog.read = real_read  # type: ignore[method-assign]
            registry_mod.RESCAN_EVERY_S = saved
            t.cancel()
        assert threads == [False] and ticks >= 5, (threads, ticks)
        await reg.close()

    run(body)


def test_a_fifo_models_toml_does_not_wedge_the_server(tmp_path: Path, models_dir: Path) -> None:
    """A models.toml replaced by a FIFO while serving: the rescan of an unknown name keeps the
    catalog read before (logged), and /health and the resident model keep answering."""
    d = _linked(tmp_path, models_dir, "alpha")
    done = threading.Event()

    def unwedge() -> None:  # before the fix the loop blocked in open(): a writer lets it go
        if not done.wait(10):
            fd = os.open(d / "models.toml", os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)

    async def body() -> None:
        async with in_process(models_dir=str(d)) as (client, _app):
            os.mkfifo(d / "models.toml")
            threading.Thread(target=unwedge, daemon=True).start()
            registry_mod.RESCAN_EVERY_S, saved = 0.0, registry_mod.RESCAN_EVERY_S
            t0 = time.monotonic()
            try:
                status, _, _ = await _post(client, {"model": "delta", "input": image_item(1)})
                assert status == 404
                status, _, _ = await _post(client, _input("alpha", 1))
                assert status == 200
            finally:
                registry_mod.RESCAN_EVERY_S = saved
                done.set()
            assert time.monotonic() - t0 < 5

    run(body)


# ---- L13: a client's keep_alive is its own, bounded; the 404 listing is capped --------------------


def test_a_clients_keep_alive_0_does_not_unload_the_model_for_the_others(models_dir: Path) -> None:
    async def body() -> None:
        reg = _registry(models_dir, Loader(), keep_alive_s=60.0)
        await _use(reg, "alpha")  # another client's request: its model stays 60 s
        async with reg.use("alpha", keep_alive_s=0):
            pass
        await reg.reap()
        assert "alpha" in reg.resident
        async with reg.use("beta", keep_alive_s=0):  # the only user of beta asks for 0: it goes
            pass
        await reg.reap()
        assert "beta" not in reg.resident
        await reg.close()

    run(body)


def test_a_clients_keep_alive_cannot_pin_a_model_past_the_server_bound(models_dir: Path) -> None:
    async def body(max_keep: float | None) -> bool:
        reg = _registry(models_dir, Loader(), keep_alive_s=0.1, max_keep_alive_s=max_keep)
        async with reg.use("alpha", keep_alive_s=86_400):
            pass
        await asyncio.sleep(0.2)
        await reg.reap()
        kept = "alpha" in reg.resident
        await reg.close()
        return kept

    assert asyncio.run(body(None)) is False  # bounded by the model's own keep-alive (0.1 s)
    assert asyncio.run(body(60.0)) is True  # --max-keep-alive-s 60 lets a client ask for more


def test_the_404_listing_is_capped_and_says_how_many_more(tmp_path: Path) -> None:
    d = tmp_path / "many"
    d.mkdir()
    for i in range(5000):
        (d / f"model-{i:05d}.gguf").write_bytes(b"")

    async def body() -> None:
        reg = Registry(Catalog((), str(d)), Loader(), keep_alive_s=60, max_loaded=0, max_concurrent_loads=1)
        with pytest.raises(ApiError) as err:
            await _use(reg, "delta")
        message = err.value.message
        assert err.value.status == 404 and len(message) < 1024, len(message)
        assert "'model-00000'" in message and "4980 more" in message and "/v1/models" in message, message
        await reg.close()

    run(body)


def test_a_model_file_that_became_a_fifo_fails_its_load_at_once(tmp_path: Path, models_dir: Path) -> None:
    """Read as a regular file, replaced by a FIFO before its first request: the load refuses it from
    its stat (opening it would hold a loading thread for good), and the failure backs off."""
    d = _linked(tmp_path, models_dir, "alpha", "beta")

    async def body() -> None:
        loader = Loader()
        reg = Registry(Catalog((), str(d)), loader, keep_alive_s=60, max_loaded=0, max_concurrent_loads=1)
        (d / "beta.gguf").unlink()
        os.mkfifo(d / "beta.gguf")
        for _ in range(3):
            with pytest.raises(ApiError) as err:
                async with asyncio.timeout(5):
                    await _use(reg, "beta")
            assert err.value.code == "model_load_failed"
            assert "beta.gguf is not a regular file" in err.value.message and str(d) not in err.value.message
        assert loader.started == [] and reg.loads == 1
        await reg.close()

    run(body)


def test_closing_settles_every_waiting_request(models_dir: Path) -> None:
    """Shutdown with a load running and two queued behind the cap: every waiter gets 503
    shutting_down, none is left waiting."""

    async def body() -> None:
        loader = Loader()
        loader.gate.clear()  # alpha's load hangs
        reg = _registry(models_dir, loader, max_loaded=1)
        waiting = [asyncio.create_task(_use(reg, m)) for m in ("alpha", "alpha", "beta", "text")]
        await asyncio.sleep(0.05)
        async with asyncio.timeout(5):
            await reg.close()
            results = await asyncio.gather(*waiting, return_exceptions=True)
        assert all(isinstance(r, ApiError) and r.code == "shutting_down" for r in results), results

    run(body)
