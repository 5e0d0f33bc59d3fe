"""The model registry: --models-dir and models.toml, loading on demand (once per model, in parallel
across models, within the cold-load cap), the smoke test, residency (references, keep-alive, LRU
under --max-loaded-models, 503 when all are busy), and the memory given back on unload.

The Registry tests run its real code with a loader seam (fast and deterministic); the app tests go
through HTTP to real tiny models."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_server_support import decode_embeddings, image_item, in_process, run

import jepa
from jepa_server import registry as registry_mod
from jepa_server import workers as workers_mod
from jepa_server.catalog import Catalog, CatalogError, ModelEntry
from jepa_server.errors import ApiError
from jepa_server.keys import RUNTIME
from jepa_server.registry import Registry

from conftest import bits

# ---- models on disk --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three tiny ViTs of different widths (so their vectors tell them apart) and a file that is
    not a model."""
    from jepa.demo import write_demo_model

    d = tmp_path_factory.mktemp("models")
    for name, dim, seed in (("alpha", 64, 1), ("beta", 96, 2), ("gamma", 128, 3)):
        write_demo_model(d / f"{name}.gguf", embed_dim=dim, n_layer=2, n_head=2, img_size=32, seed=seed)
    (d / "notes.txt").write_text("not a model")
    return d


def _dir_with(tmp_path: Path, models_dir: Path, names: tuple[str, ...], toml: str | None = None) -> Path:
    d = tmp_path / "m"
    d.mkdir()
    for n in names:
        (d / f"{n}.gguf").symlink_to(models_dir / f"{n}.gguf")
    if toml is not None:
        (d / "models.toml").write_text(toml)
    return d


# ---- the catalog -------------------------------------------------------------------------------


def test_the_catalog_serves_every_gguf_by_its_id(models_dir: Path) -> None:
    c = Catalog((), str(models_dir))
    assert c.ids() == ["alpha", "beta", "gamma"]
    assert c.find("beta.gguf") is c.find("beta")
    assert c.find("notes") is None and c.default is None


def test_models_toml_names_and_aliases(tmp_path: Path, models_dir: Path) -> None:
    toml = '[models.small]\nfile = "alpha.gguf"\naliases = ["a", "tiny"]\nkeep_alive_s = 5\n'
    c = Catalog((), str(_dir_with(tmp_path, models_dir, ("alpha", "beta"), toml)))
    assert c.ids() == ["beta", "small"]
    small = c.find("tiny")
    assert small is not None and small.id == "small" and small.keep_alive_s == 5.0
    assert c.find("alpha") is small  # the file's own name still reaches it


@pytest.mark.parametrize(
    ("toml", "why"),
    [
        ('[models.x]\nfile = "../alpha.gguf"\n', "bare name"),
        ('[models.x]\nfile = "missing.gguf"\n', "not a GGUF file"),
        ('[models.x]\nfile = "alpha.gguf"\n[models.y]\nfile = "alpha.gguf"\n', "named twice"),
        ('[models.beta]\nfile = "alpha.gguf"\n', "two models are named"),
        ('[models.x]\nfile = "alpha.gguf"\naliases = ["beta"]\n', "would mean both"),
        ('[models.x]\nfile = "alpha.gguf"\nweights = 1\n', "unknown key"),
        ('[models."a b"]\nfile = "alpha.gguf"\n', "not a usable model name"),
        ("[other]\n", "unknown table"),
        ("not toml = = 1", "cannot read"),
        # issue 36, M8: 500 nested arrays raised an uncaught RecursionError (every rescan a 500)
        ('[models.x]\nfile = "alpha.gguf"\naliases = ' + "[" * 500 + "]" * 500 + "\n", "nested more than 32"),
        ('[models.x]\nfile = "alpha.gguf"\naliases = ' + "[" * 40 + "]" * 40 + "\n", "nested more than 32"),
    ],
)
def test_a_bad_models_toml_is_refused_naming_why(
    tmp_path: Path, models_dir: Path, toml: str, why: str
) -> None:
    with pytest.raises(CatalogError, match=why):
        Catalog((), str(_dir_with(tmp_path, models_dir, ("alpha", "beta"), toml)))


def test_m_files_are_pinned_and_the_first_is_the_default(models_dir: Path) -> None:
    c = Catalog((str(models_dir / "gamma.gguf"),), None, "main")
    assert c.default is not None and c.default.id == "main" and c.default.pinned


def test_a_file_served_twice_is_refused(models_dir: Path) -> None:
    with pytest.raises(CatalogError, match="two models are named 'gamma'"):
        Catalog((str(models_dir / "gamma.gguf"),), str(models_dir))


# ---- the registry, with a loader seam -----------------------------------------------------------


class FakeModel:
    """What the registry asks of a loaded model: whether its file changed under it."""

    def __init__(self) -> None:
        self.changed: str | None = None

    def file_changed(self) -> str | None:
        return self.changed


class FakeEngine:
    def __init__(self, entry: ModelEntry) -> None:
        self.entry = entry
        self.closed = False
        self.model = FakeModel()

    async def close(self, timeout: float) -> None:
        self.closed = True


class Loader:
    """Counts loads, holds each one until released, fails the models it is told to."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.started: list[str] = []
        self.running = 0
        self.peak = 0
        self.fail: set[str] = set()
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, entry: ModelEntry) -> FakeEngine:
        self.started.append(entry.id)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(self.delay)
            await self.gate.wait()
            if entry.id in self.fail:
                raise jepa.ModelFileError(f"{entry.id}: broken on purpose")
            return FakeEngine(entry)
        finally:
            self.running -= 1


def _registry(models_dir: Path, loader: Loader, **kw: Any) -> Registry:
    opts: dict[str, Any] = dict(keep_alive_s=600.0, max_loaded=0, max_concurrent_loads=4)
    opts.update(kw)
    return Registry(Catalog((), str(models_dir)), loader, **opts)


async def _use(reg: Registry, name: str, hold: float = 0.0) -> FakeEngine:
    async with reg.use(name) as engine:
        await asyncio.sleep(hold)
        return engine  # type: ignore[no-any-return]


def test_concurrent_first_requests_share_one_load(models_dir: Path) -> None:
    async def body() -> None:
        loader = Loader(delay=0.05)
        reg = _registry(models_dir, loader)
        engines = await asyncio.gather(*(_use(reg, "alpha") for _ in range(16)))
        assert loader.started == ["alpha"] and reg.loads == 1
        assert all(e is engines[0] for e in engines)
        await reg.close()
        assert engines[0].closed

    run(body)


def test_models_load_in_parallel_within_the_cold_load_cap(models_dir: Path) -> None:
    async def body(cap: int) -> tuple[int, int]:
        loader = Loader(delay=0.05)
        reg = _registry(models_dir, loader, max_concurrent_loads=cap)
        await asyncio.gather(*(_use(reg, m) for m in ("alpha", "beta", "gamma")))
        await reg.close()
        return loader.peak, reg.loads_peak

    assert asyncio.run(body(3)) == (3, 3)  # they overlapped
    assert asyncio.run(body(2)) == (2, 2)  # and the cap held
    assert asyncio.run(body(1)) == (1, 1)


def test_a_warm_model_never_waits_behind_a_load(models_dir: Path) -> None:
    async def body() -> None:
        loader = Loader()
        reg = _registry(models_dir, loader, max_concurrent_loads=1)
        await _use(reg, "alpha")
        loader.gate.clear()  # beta's load now hangs until released
        cold = asyncio.create_task(_use(reg, "beta"))
        await asyncio.sleep(0.01)
        async with asyncio.timeout(1):
            await _use(reg, "alpha")  # answered while beta still loads
        assert not cold.done()
        loader.gate.set()
        await cold
        await reg.close()

    run(body)


def test_a_failed_load_answers_503_and_a_request_after_its_backoff_tries_again(models_dir: Path) -> None:
    async def body() -> None:
        loader = Loader()
        loader.fail.add("beta")
        reg = _registry(models_dir, loader, load_backoff_s=(0.05, 0.1))
        results = await asyncio.gather(*(_use(reg, "beta") for _ in range(4)), return_exceptions=True)
        assert all(isinstance(r, ApiError) for r in results)
        err = results[0]
        assert isinstance(err, ApiError) and err.status == 503 and err.code == "model_load_failed"
        assert "broken on purpose" in err.message and loader.started == ["beta"]
        loader.fail.clear()  # the load is over: once its backoff has run, a request loads it
        await asyncio.sleep(0.06)
        await _use(reg, "beta")
        assert loader.started == ["beta", "beta"] and "beta" in reg.resident
        await reg.close()

    run(body)


def test_a_model_whose_file_changed_is_never_served_again_and_loads_anew(models_dir: Path) -> None:
    async def body() -> None:
        loader = Loader()
        reg = _registry(models_dir, loader)
        first = await _use(reg, "alpha")
        # Idle when its file changes: unloaded at the next request, which loads the file again.
        first.model.changed = "it was rewritten in place since it was loaded"
        second = await _use(reg, "alpha")
        assert second is not first and loader.started == ["alpha", "alpha"]
        await asyncio.sleep(0)
        assert first.closed
        # In use when its file changes: a new request waits for the one in flight to end (it keeps
        # its engine), then gets the file loaded again.
        holder = asyncio.create_task(_use(reg, "alpha", hold=0.2))
        await asyncio.sleep(0.05)
        second.model.changed = "its size went from 100 to 4096 bytes since it was loaded"
        third = await _use(reg, "alpha")
        assert holder.done() and await holder is second
        assert third is not second and loader.started == ["alpha"] * 3
        await asyncio.sleep(0)
        assert second.closed
        await reg.close()
        # A request in flight that outlasts the wait: the new request is 503 with Retry-After.
        reg = _registry(models_dir, loader, slot_wait_s=0.05)
        fourth = await _use(reg, "alpha")
        holder = asyncio.create_task(_use(reg, "alpha", hold=0.3))
        await asyncio.sleep(0.02)
        fourth.model.changed = "it was rewritten in place since it was loaded"
        with pytest.raises(ApiError) as e:
            await _use(reg, "alpha")
        assert e.value.status == 503 and e.value.code == "model_file_changed"
        assert e.value.headers.get("Retry-After") == "1"
        assert await holder is fourth
        await reg.close()

    run(body)


def test_an_unknown_model_is_404_naming_what_is_served(models_dir: Path) -> None:
    async def body() -> None:
        reg = _registry(models_dir, Loader())
        with pytest.raises(ApiError) as err:
            await _use(reg, "delta")
        assert err.value.status == 404 and "'alpha', 'beta' and 'gamma'" in err.value.message
        with pytest.raises(ApiError) as err:
            await _use(reg, None)  # type: ignore[arg-type]
        assert err.value.status == 400 and err.value.code == "model_required"
        await reg.close()

    run(body)


def test_idle_models_unload_after_their_keep_alive(models_dir: Path) -> None:
    async def body() -> None:
        reg = _registry(models_dir, Loader(), keep_alive_s=0.2, max_keep_alive_s=60)
        alpha = await _use(reg, "alpha")
        async with reg.use("beta", keep_alive_s=60):  # the request's own keep_alive (within the bound)
            await reg.reap()
        await asyncio.sleep(0.25)
        busy = asyncio.create_task(_use(reg, "gamma", hold=0.5))
        await asyncio.sleep(0.3)
        await reg.reap()
        assert alpha.closed and set(reg.resident) == {"beta", "gamma"}  # gamma is in use: kept
        await busy
        await reg.close()

    run(body)


def test_lru_eviction_and_a_load_at_the_cap_waits_for_a_busy_model_to_drain(models_dir: Path) -> None:
    """Room goes to the least recently used idle model; with every resident model in use, a load
    waits for the least recently used one to finish its requests (503 models_busy once the wait
    passes --queue-timeout-s: test_server_registry_hardening), and -m-only caps are 503 at once."""

    async def body() -> None:
        reg = _registry(models_dir, Loader(), max_loaded=2)
        alpha = await _use(reg, "alpha")
        await asyncio.sleep(0.01)
        beta = await _use(reg, "beta")
        await _use(reg, "gamma")  # alpha, the least recently used idle one, goes
        assert alpha.closed and set(reg.resident) == {"beta", "gamma"}
        holds = [asyncio.create_task(_use(reg, m, hold=0.3)) for m in ("beta", "gamma")]
        await asyncio.sleep(0.05)
        t0 = asyncio.get_running_loop().time()
        await _use(reg, "alpha")  # beta (used least recently) drains, then goes
        assert asyncio.get_running_loop().time() - t0 >= 0.2
        assert beta.closed and set(reg.resident) == {"alpha", "gamma"}
        await asyncio.gather(*holds)
        await reg.close()

    run(body)


def test_a_cap_held_by_m_models_is_503_models_busy_at_once(tmp_path: Path, models_dir: Path) -> None:
    async def body() -> None:
        d = _dir_with(tmp_path, models_dir, ("beta",))
        catalog = Catalog((str(models_dir / "gamma.gguf"),), str(d))
        reg = Registry(catalog, Loader(), keep_alive_s=60, max_loaded=1, max_concurrent_loads=1)
        await reg.load_pinned()
        with pytest.raises(ApiError) as err:
            await _use(reg, "beta")  # gamma never gives its place up: no wait
        assert err.value.status == 503 and err.value.code == "models_busy"
        assert err.value.headers.get("Retry-After") == "1"
        await reg.close()

    run(body)


def test_concurrent_first_requests_at_the_cap_evict_once_and_load_once(models_dir: Path) -> None:
    """At --max-loaded-models 2 with two idle models resident, eight concurrent first requests for a
    third: one eviction (the least recently used), one load."""

    async def body() -> None:
        loader = Loader(delay=0.05)
        reg = _registry(models_dir, loader, max_loaded=2)
        alpha = await _use(reg, "alpha")
        await asyncio.sleep(0.01)
        beta = await _use(reg, "beta")
        engines = await asyncio.gather(*(_use(reg, "gamma") for _ in range(8)))
        assert loader.started == ["alpha", "beta", "gamma"] and all(e is engines[0] for e in engines)
        assert alpha.closed and not beta.closed and set(reg.resident) == {"beta", "gamma"}
        await reg.close()

    run(body)


def test_a_model_added_to_the_directory_becomes_servable(tmp_path: Path, models_dir: Path) -> None:
    async def body() -> None:
        d = _dir_with(tmp_path, models_dir, ("alpha",))
        reg = Registry(Catalog((), str(d)), Loader(), keep_alive_s=60, max_loaded=0, max_concurrent_loads=1)
        (d / "beta.gguf").symlink_to(models_dir / "beta.gguf")
        registry_mod.RESCAN_EVERY_S, saved = 0.0, registry_mod.RESCAN_EVERY_S
        try:
            await _use(reg, "beta")
        finally:
            registry_mod.RESCAN_EVERY_S = saved
        await reg.close()

    run(body)


# ---- through HTTP, on real models ----------------------------------------------------------------


def _post(client: Any, path: str, body: dict[str, Any]) -> Any:
    return client.post(path, data=json.dumps(body), headers={"Content-Type": "application/json"})


def test_requests_reach_the_model_they_name(models_dir: Path) -> None:
    """Each model answers its own vectors, bit for bit what jepa.embed gives on that file; /v1/models
    and /info tell what is resident."""
    want = {
        m: jepa.embed(jepa.Model(models_dir / f"{m}.gguf").context(), [_png(1)])[0]
        for m in ("alpha", "gamma")
    }

    async def body() -> None:
        async with in_process(models_dir=str(models_dir)) as (client, _app):
            r = await client.get("/v1/models")
            listed = {m["id"]: m["resident"] for m in (await r.json())["data"]}
            assert listed == {"alpha": False, "beta": False, "gamma": False}
            for m in ("alpha", "gamma"):
                r = await _post(client, "/v1/embeddings", {"model": m, "input": image_item(1)})
                assert r.status == 200, await r.text()
                got = decode_embeddings(await r.json())[0]
                assert np.array_equal(bits(got), bits(want[m])), m
            r = await _post(client, "/v1/embeddings", {"model": "delta", "input": image_item(1)})
            assert r.status == 404 and "'alpha', 'beta' and 'gamma'" in (await r.json())["error"]["message"]
            r = await _post(client, "/v1/embeddings", {"input": image_item(1)})
            assert r.status == 400 and (await r.json())["error"]["code"] == "model_required"
            r = await client.get("/v1/models")
            listed = {m["id"]: m["resident"] for m in (await r.json())["data"]}
            assert listed == {"alpha": True, "beta": False, "gamma": True}
            info = await (await client.get("/info")).json()
            resident = {m["id"]: m for m in info["models"]}
            assert set(resident) == {"alpha", "gamma"} and info["model"] is None
            a = resident["alpha"]
            assert a["references"] == 0 and a["requests"] == 1 and a["items_served"] == 1
            assert a["devices"] == ["cpu"] and a["dtype"] == "f32" and a["idle_s"] >= 0
            health = await client.get("/health")
            assert health.status == 200
            assert (await health.json())["models"] == {"servable": 3, "resident": 2, "loading": 0}

    run(body)


def _png(seed: int) -> bytes:
    from test_server_support import png_bytes

    return png_bytes(seed, (64, 48))


def test_a_model_that_fails_its_smoke_test_is_503_with_the_reason(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The smoke test is the warm call every worker runs before a model is resident: a model whose
    call fails there fails its load, not every later request."""

    def broken_input(model: jepa.Model) -> np.ndarray:
        return np.zeros((1, 3, 1, 7, 7), np.float32)  # not a shape this model takes

    monkeypatch.setattr(workers_mod, "warm_input", broken_input)

    async def body() -> None:
        async with in_process(models_dir=str(models_dir)) as (client, _app):
            r = await _post(client, "/v1/embeddings", {"model": "beta", "input": image_item(1)})
            err = assert_envelope_json(r.status, await r.json(), 503)
            assert err["code"] == "model_load_failed" and "beta" in err["message"]
            assert "smoke test" in err["message"] and "patch size" in err["message"], err
            r = await client.get("/v1/models")
            assert not any(m["resident"] for m in (await r.json())["data"])

    run(body)


def assert_envelope_json(status: int, body: dict[str, Any], want: int) -> dict[str, Any]:
    assert status == want, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err  # type: ignore[no-any-return]


def test_keep_alive_is_validated(models_dir: Path) -> None:
    async def body() -> None:
        async with in_process(models_dir=str(models_dir)) as (client, _app):
            for bad in (-1, 1e9, "soon", True):
                r = await _post(client, "/v1/embeddings", {"model": "alpha", "keep_alive": bad,
                                                           "input": image_item(1)})
                assert r.status == 400 and (await r.json())["error"]["param"] == "keep_alive", bad

    run(body)


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_load_unload_cycles_give_the_memory_back(models_dir: Path) -> None:
    """Models loaded and evicted (LRU under --max-loaded-models 1) over and over: RSS ends near where
    it started (mapped files unmapped, workers' contexts freed)."""

    async def body() -> int:
        async with in_process(models_dir=str(models_dir), max_loaded_models=1) as (
            client,
            app,
        ):
            async def cycle() -> None:
                for m in ("alpha", "beta", "gamma"):
                    r = await _post(client, "/v1/embeddings", {"model": m, "input": image_item(1)})
                    assert r.status == 200, await r.text()

            await cycle()
            await cycle()  # warm: arenas, thread pools, the decoder
            gc.collect()
            base = _rss_kib()
            for _ in range(8):
                await cycle()
            gc.collect()
            reg = app[RUNTIME].registry
            assert reg is not None and reg.loads == 30
            return _rss_kib() - base

    grown = asyncio.run(body()) / 1024
    assert grown < 16, f"RSS grew {grown:.1f} MiB over 24 load/unload cycles"


def test_skip_smoke_test_marks_the_model_resident_without_the_call(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--skip-smoke-test: the same broken warm input does not fail the load (the call is not made);
    the request then runs on its own input."""
    monkeypatch.setattr(workers_mod, "warm_input", lambda model: np.zeros((1, 3, 1, 7, 7), np.float32))

    async def body() -> None:
        async with in_process(models_dir=str(models_dir), skip_smoke_test=True) as (client, _app):
            r = await _post(client, "/v1/embeddings", {"model": "beta", "input": image_item(1)})
            assert r.status == 200, await r.text()

    run(body)



def test_devices_replicate_a_model_and_answer_the_same_bits(models_dir: Path) -> None:
    """--devices cpu,cpu: two replicas of one loaded model (one copy of the weights), each with its
    own workers, pulling from one queue; every answer is bit for bit the single-device one."""
    model = jepa.Model(models_dir / "gamma.gguf")
    want = jepa.embed(model.context(), [_png(i) for i in range(12)])

    async def body() -> None:
        async with in_process(models_dir=str(models_dir), devices="cpu,cpu", threads=1) as (client, app):
            bodies = [{"model": "gamma", "input": [image_item(i) for i in range(j, j + 3)]}
                      for j in range(0, 12, 3)]
            answers = await asyncio.gather(*(_post(client, "/v1/embeddings", b) for b in bodies))
            got = np.concatenate([decode_embeddings(await r.json()) for r in answers])
            assert np.array_equal(bits(got), bits(np.stack(want)))
            reg = app[RUNTIME].registry
            assert reg is not None
            engine = reg.resident["gamma"].engine
            assert engine.devices == ("cpu", "cpu#2") and len(engine.replicas) == 2
            assert engine.replicas[0].workers.model is engine.replicas[1].workers.model
            info = await (await client.get("/info")).json()
            assert info["models"][0]["devices"] == ["cpu", "cpu#2"]

    run(body)


_TOML_PIECES = ['[models.', 'x]', '"a b"', ']\n', 'file = ', '"alpha.gguf"', '"../beta.gguf"', '"beta.gguf"',
                'aliases = ', '["a", "b"]', '[1, 2]', '"s"', 'keep_alive_s = ', '-1', '5', 'true', '1e999',
                '\n', '[other]\n', '{a = 1}', '"\\u0000"', '= = ', '[[models]]\n', 'models = 3\n']


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(
    st.binary(max_size=200),
    st.lists(st.sampled_from(_TOML_PIECES), max_size=20).map(lambda p: "".join(p).encode()),
))
def test_any_models_toml_is_served_or_refused_with_a_catalog_error(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path, data: bytes
) -> None:
    """models.toml is parsed input: whatever it holds, reading the catalog serves it or raises
    CatalogError naming why, never anything else."""
    d = tmp_path_factory.mktemp("toml")
    for n in ("alpha", "beta"):
        (d / f"{n}.gguf").symlink_to(models_dir / f"{n}.gguf")
    (d / "models.toml").write_bytes(data)
    try:
        c = Catalog((), str(d))
    except CatalogError:
        return
    assert all(e.path.startswith(str(d)) for e in c.entries())  # nothing outside the directory


def test_a_text_model_is_smoke_tested_with_its_own_tokenizer(tmp_path: Path) -> None:
    """A text model's smoke test tokenizes and encodes a short text: a model whose tokenizer.json
    is broken fails its load with the reason, not its first request; a sound one serves text."""
    from jepa.testing.random_text import write_random_bert

    d = tmp_path / "text"
    d.mkdir()
    write_random_bert(d / "good.gguf")
    write_random_bert(d / "broken.gguf", tokenizer='{"version": "1.0", "model": {"type": "nonsense"}}')

    async def body() -> None:
        async with in_process(models_dir=str(d)) as (client, _app):
            r = await _post(client, "/v1/embeddings", {"model": "good", "input": ["a photo of a cat"]})
            assert r.status == 200, await r.text()
            r = await _post(client, "/v1/embeddings", {"model": "broken", "input": ["a photo of a cat"]})
            err = assert_envelope_json(r.status, await r.json(), 503)
            assert err["code"] == "model_load_failed" and "broken" in err["message"], err

    run(body)


def test_metrics_are_per_model_and_an_unloaded_model_leaves_no_gauges(models_dir: Path) -> None:
    """Two models' dispatchers count apart (every sample carries the model's id); a model unloaded
    takes its gauges (queue depth, workers) with it, its counters stay."""
    from test_server_support import metric

    async def body() -> None:
        async with in_process(models_dir=str(models_dir), max_loaded_models=2) as (client, _app):
            for m, n in (("alpha", 1), ("beta", 3)):
                items = [image_item(i) for i in range(n)]
                r = await _post(client, "/v1/embeddings", {"model": m, "input": items})
                assert r.status == 200, await r.text()
            text = (await (await client.get("/metrics")).read()).decode()
            assert metric(text, "jepa_items_total", {"model": "alpha"}) == 1
            assert metric(text, "jepa_items_total", {"model": "beta"}) == 3
            assert metric(text, "jepa_workers", {"model": "beta", "state": "idle"}) == 1
            assert metric(text, "jepa_model_events_total", {"model": "beta", "event": "loaded"}) == 1
            # alpha, the least recently used, goes
            r = await _post(client, "/v1/embeddings", {"model": "gamma", "input": image_item(1)})
            assert r.status == 200
            text = (await (await client.get("/metrics")).read()).decode()
            assert 'jepa_workers{model="alpha"' not in text and 'jepa_queue_depth{model="alpha"}' not in text
            assert metric(text, "jepa_items_total", {"model": "alpha"}) == 1
            assert metric(text, "jepa_model_events_total", {"model": "alpha", "event": "unloaded_lru"}) == 1
            assert metric(text, "jepa_workers", {"model": "gamma", "state": "idle"}) == 1

    run(body)


def test_a_file_models_toml_names_never_makes_an_unusable_name(tmp_path: Path) -> None:
    # fuzz_catalog's findings: a file named `.gguf` or with a control character, served under a
    # models.toml id, made "" and "\x03" names a request could use.
    for name in (".gguf", "\x03.gguf"):
        d = tmp_path / f"d{ord(name[0])}"
        d.mkdir()
        (d / name).write_bytes(b"x")
        (d / "models.toml").write_text(f'[models.clean]\nfile = {json.dumps(name)}\n')
        cat = Catalog((), str(d))
        (entry,) = cat.entries()
        assert entry.id == "clean" and all(n and n.isprintable() for n in entry.names), entry.names
        assert cat.find("") is None and cat.find("clean") is entry
    assert cat.find("\x03.gguf") is None and cat.find("\x03") is None


def test_the_default_cap_keeps_three_models_resident(tmp_path: Path) -> None:
    """Issue 36, M9: with no --max-loaded-models any client could load the whole directory (300 tiny
    models: 2 GB and 908 threads). The default keeps three resident, unloading the least recently
    used idle one, and every request is still served."""
    from jepa.demo import write_demo_model

    for i in range(5):
        write_demo_model(tmp_path / f"m{i}.gguf", embed_dim=32, n_layer=1, n_head=2, img_size=32, seed=i)

    async def body() -> None:
        async with in_process(models_dir=str(tmp_path)) as (client, _app):
            for round_ in range(2):
                for i in range(5):
                    r = await _post(client, "/v1/embeddings", {"model": f"m{i}", "input": image_item(i)})
                    assert r.status == 200, (round_, i, await r.text())
                    resident = (await (await client.get("/health")).json())["models"]["resident"]
                    assert resident <= 3, (round_, i, resident)

    run(body)


def test_the_cap_makes_room_for_every_pinned_model(models_dir: Path) -> None:
    from jepa_server.catalog import Catalog
    from jepa_server.runtime import loaded_cap

    files = tuple(str(models_dir / f"{n}.gguf") for n in ("alpha", "beta", "gamma"))
    assert loaded_cap(3, Catalog(files, None), False) == 3
    assert loaded_cap(2, Catalog(files, None), False) == 3  # the -m models always fit
    assert loaded_cap(0, Catalog(files, None), False) == 0  # no cap


def test_a_model_with_nan_weights_fails_its_smoke_test(tmp_path: Path) -> None:
    """Issue 36, L20: NaN or infinite weights passed the smoke test, and then every request was a 422
    while the model stayed resident. Now its load fails, naming why, and it is not resident."""
    import gguf

    from jepa.demo import write_demo_model

    src = write_demo_model(tmp_path / "ok.gguf", embed_dim=32, n_layer=1, n_head=2, img_size=32, seed=1)
    d = tmp_path / "models"
    d.mkdir()
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(d / "nan.gguf"), "jepa")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
    poisoned = False
    for t in r.tensors:
        data = np.array(t.data, dtype=np.float32).reshape(tuple(int(n) for n in reversed(t.shape.tolist())))
        if not poisoned and t.name.endswith("ffn_up.weight"):
            data[0, 0] = np.nan
            poisoned = True
        w.add_tensor(t.name, data)
    assert poisoned
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    async def body() -> None:
        async with in_process(models_dir=str(d)) as (client, _app):
            r = await _post(client, "/v1/embeddings", {"model": "nan", "input": image_item(1)})
            err = assert_envelope_json(r.status, await r.json(), 503)
            assert err["code"] == "model_load_failed" and "smoke test" in err["message"], err
            assert "not finite" in err["message"], err
            r = await client.get("/v1/models")
            assert not any(m["resident"] for m in (await r.json())["data"])

    run(body)
