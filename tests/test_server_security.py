"""Security: --files-root confines local paths (real symlinks, `..`, absolute paths, a sibling whose
name starts with the root's), every refusal under a root reads the same; the API key."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_server_support import b64, decode_embeddings, in_process, png_bytes, run

from jepa_server.security import FILE_REFUSAL, LocalFiles

from conftest import bits


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """root/ with images, a subdir, symlinks in and out; a sibling root-evil/; outside/."""
    root, evil, outside = tmp_path / "root", tmp_path / "root-evil", tmp_path / "outside"
    for d in (root / "sub", root / "dir", evil, outside):
        d.mkdir(parents=True)
    (root / "a.png").write_bytes(png_bytes(1))
    (root / "sub" / "b.png").write_bytes(png_bytes(2))
    (root / "notimage.txt").write_text("plain text, not an image")
    (evil / "x.png").write_bytes(png_bytes(3))
    (outside / "secret.png").write_bytes(png_bytes(4))
    os.symlink(root / "a.png", root / "link_in.png")
    os.symlink(outside / "secret.png", root / "link_out.png")
    os.symlink(outside, root / "link_dir")
    os.symlink(evil, root / "link_evil")
    return {"root": root, "evil": evil, "outside": outside, "tmp": tmp_path}


def _post(client: Any, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    return client.post("/v1/embeddings", json=body, headers=headers or {})


ALLOWED = ["a.png", "sub/b.png", "link_in.png", "./sub/../a.png", "sub//b.png"]
REFUSED = [
    "../outside/secret.png",  # `..` out
    "sub/../../outside/secret.png",
    "link_out.png",  # a symlink to a file outside
    "link_dir/secret.png",  # through a symlinked directory outside
    "../root-evil/x.png",  # the sibling whose name starts with the root's
    "link_evil/x.png",
    "missing.png",  # does not exist
    "notimage.txt",  # not an image
    "dir",  # a directory
    "",
]


def test_files_root_serves_inside_and_refuses_every_escape_alike(
    tree: dict[str, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root, outside = tree["root"], tree["outside"]
    # Relative paths resolve against the root, never the working directory.
    monkeypatch.chdir(outside)
    absolute_refused = [str(outside / "secret.png"), str(tree["evil"] / "x.png"), "/etc/passwd", "secret.png"]

    async def body() -> None:
        async with in_process(files_root=str(root)) as (client, _):
            reference = decode_embeddings(
                await (
                    await _post(client, {"input": {"b64": b64(png_bytes(1))}, "encoding_format": "base64"})
                ).json()
            )
            for path in [*ALLOWED, str(root / "a.png")]:
                for item in (path, {"path": path}):
                    resp = await _post(client, {"input": [item], "encoding_format": "base64"})
                    assert resp.status == 200, (path, await resp.text())
                    got = decode_embeddings(await resp.json())
                    if "b.png" not in path:
                        np.testing.assert_array_equal(bits(got), bits(reference))
            messages = set()
            for path in REFUSED + absolute_refused:
                for item in (path, {"path": path}, {"frames": [path]}, {"video": path, "frames": 1}):
                    resp = await _post(client, {"input": item})
                    err = (await resp.json())["error"]
                    assert resp.status == 400, (path, err)
                    assert err["code"] == "invalid_path", (path, err)
                    messages.add(err["message"])
                    assert (await client.get("/health")).status == 200
            assert messages == {FILE_REFUSAL}

    with caplog.at_level(logging.DEBUG, logger="jepa_server"):
        run(body)
    # The real reasons are in the server's log only.
    logged = caplog.text
    assert "outside the root" in logged and "not a regular file" in logged


def test_local_files_without_a_root_name_the_reason(tree: dict[str, Path]) -> None:
    async def body() -> None:
        async with in_process(allow_local_files=True) as (client, _):
            ok = await _post(client, {"input": str(tree["outside"] / "secret.png")})
            assert ok.status == 200
            missing = await _post(client, {"input": str(tree["tmp"] / "nope.png")})
            err = (await missing.json())["error"]
            assert missing.status == 400 and "no such file" in err["message"]

    run(body)


def test_a_root_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    for root in (f, tmp_path / "missing"):
        with pytest.raises(ValueError, match="is not a directory"):
            LocalFiles(False, str(root))


def test_the_root_itself_through_a_symlink(tree: dict[str, Path]) -> None:
    """A root given through a symlink is canonicalised too: its files are inside, nothing else is."""
    link = tree["tmp"] / "root-link"
    os.symlink(tree["root"], link)
    files = LocalFiles(False, str(link))
    assert files.resolve("a.png", "input") == str((tree["root"] / "a.png").resolve())
    with pytest.raises(Exception, match="under the server's files root"):
        files.resolve("../outside/secret.png", "input")


# -- the API key ---------------------------------------------------------------------------------


def test_api_key_guards_everything_but_health_and_metrics() -> None:
    async def body() -> None:
        async with in_process(api_key="s3cret") as (client, _):
            item = {"b64": b64(png_bytes(1))}
            guarded = [
                ("GET", "/v1/models", None),
                ("GET", "/info", None),
                ("POST", "/v1/embeddings", {"input": item}),
                ("POST", "/embed", {"inputs": item}),
                ("POST", "/classify", {"input": item}),
                ("POST", "/rollout", {"context": [item], "actions": [[0.0]]}),
            ]
            for method, path, payload in guarded:
                for headers in (
                    {},
                    {"Authorization": "Bearer wrong"},
                    {"Authorization": "s3cret"},
                    {"Authorization": "Basic s3cret"},
                    {"Authorization": "Bearer s3cret-and-more"},
                ):
                    resp = await client.request(method, path, json=payload, headers=headers)
                    err = (await resp.json())["error"]
                    assert resp.status == 401, (path, headers)
                    assert err["code"] == "invalid_api_key" and resp.headers["WWW-Authenticate"] == "Bearer"
                resp = await client.request(
                    method, path, json=payload, headers={"Authorization": "Bearer s3cret"}
                )
                assert resp.status != 401, path
            for path in ("/health", "/metrics"):
                assert (await client.get(path)).status == 200
            # The scheme is case-insensitive, as RFC 7235 has it.
            assert (await client.get("/v1/models", headers={"Authorization": "bearer s3cret"})).status == 200

    run(body)
