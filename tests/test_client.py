"""jepa.client against a real jepa-server: every item kind gives the bits jepa.embed gives for the
same pixels; refusals raise ServerError with the server's message and status."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_server_support import ServerProcess, demo_model, png_bytes, server_process, video_bytes

import jepa
from jepa.client import Client, ServerError, _png, clip, video

from conftest import bits


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with server_process("--demo", "--port", "0", "--api-key", "k3y", "--max-items", "8") as s:
        yield s


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Client:
    return Client(server.url, api_key="k3y", timeout=60)


def _expected(items: list[object], pool: str | None = None) -> np.ndarray:
    return jepa.embed(demo_model().context(threads=2), items, pool=pool)


def test_health_models_info(client: Client) -> None:
    assert client.health()["status"] == "ok"
    assert [m["id"] for m in client.models()] == ["demo-vit"]
    assert client.info()["model"]["embed_dim"] == 192


def test_paths_bytes_pil_and_arrays_give_the_python_bits(client: Client, tmp_path: Path) -> None:
    from PIL import Image

    paths = []
    for i in range(2):
        p = tmp_path / f"{i}.png"
        p.write_bytes(png_bytes(10 + i, (50 + 10 * i, 40)))
        paths.append(p)
    rgb = np.random.default_rng(3).integers(0, 256, (40, 56, 3), dtype=np.uint8)
    pil = Image.open(io.BytesIO(png_bytes(12)))
    items: list[object] = [str(paths[0]), paths[1], paths[0].read_bytes(), pil, rgb]
    expected = _expected([str(paths[0]), str(paths[1]), paths[0].read_bytes(), pil, rgb], "mean")
    for fmt in ("base64", "float"):
        got = client.embed(items, pool="mean", encoding_format=fmt)
        assert got.shape == (5, 192) and got.dtype == np.float32
        np.testing.assert_array_equal(bits(got), bits(expected))
    one = client.embed(str(paths[0]))  # one item, default pool
    np.testing.assert_array_equal(bits(one), bits(_expected([str(paths[0])])))


def test_clip_video_tokens_and_dimensions(client: Client, tmp_path: Path) -> None:
    frame = png_bytes(20)
    got = client.embed(clip([frame]))  # a one-frame clip: the demo is an image model
    np.testing.assert_array_equal(bits(got), bits(_expected([[frame]])))
    vid = tmp_path / "v.mp4"
    vid.write_bytes(video_bytes())
    got = client.embed(video(vid, frames=1))
    expected = jepa.embed(demo_model().context(threads=2), [str(vid)], frames=1)
    np.testing.assert_array_equal(bits(got), bits(expected))
    tokens = client.embed(frame, pool="none")
    assert tokens.shape == (1, 197, 192)
    cut = client.embed(frame, dimensions=8)
    assert cut.shape == (1, 8) and abs(float(np.linalg.norm(cut)) - 1) < 1e-5


def test_refusals_raise_server_error(client: Client, server: ServerProcess) -> None:
    with pytest.raises(ServerError) as e:
        client.embed({"url": "http://127.0.0.1:1/x.png"})
    assert e.value.status == 400 and e.value.code == "url" and "fetches nothing" in e.value.message
    assert isinstance(e.value, jepa.JepaError) and "HTTP 400" in str(e.value)
    with pytest.raises(ServerError) as e:
        client.embed(b"definitely not an image")
    assert e.value.status == 400 and e.value.param == "input[0]"  # the client always sends a list
    with pytest.raises(ServerError) as e:
        client.classify(png_bytes(1))
    assert e.value.status == 400 and "has no classifier head" in e.value.message
    with pytest.raises(ServerError) as e:
        client.rollout([png_bytes(1)], actions=np.zeros((2, 3)))
    assert e.value.status == 400 and "is not a world model" in e.value.message
    with pytest.raises(ServerError) as e:
        Client(server.url, api_key="wrong").models()
    assert e.value.status == 401 and e.value.code == "invalid_api_key"
    assert Client(server.url, api_key="").health()["status"] == "ok"  # /health needs no key


def test_unreachable_server_is_a_server_error() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: nothing answers
        with pytest.raises(ServerError) as e:
            Client(f"http://127.0.0.1:{port}", timeout=5).health()
    assert e.value.status == 0 and "cannot reach" in e.value.message


def test_api_key_from_the_environment(server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JEPA_API_KEY", "k3y")
    assert [m["id"] for m in Client(server.url).models()] == ["demo-vit"]


@pytest.mark.parametrize("shape", [(1, 1, 3), (7, 5, 3), (64, 33, 3)])
def test_png_writer_is_lossless(shape: tuple[int, int, int]) -> None:
    from PIL import Image

    a = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    back = np.asarray(Image.open(io.BytesIO(_png(a))).convert("RGB"))
    np.testing.assert_array_equal(back, a)
    with pytest.raises(ValueError, match="uint8"):
        _png(a.astype(np.float32))


def test_unsendable_items_fail_before_any_request() -> None:
    c = Client("http://127.0.0.1:9")  # never contacted
    with pytest.raises(TypeError, match="cannot send"):
        c.embed(object())
