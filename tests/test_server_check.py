"""`jepa-server check`: the preflight a systemd ExecStartPre runs. It passes on a servable setup and
fails, naming why, on each thing that would keep the server from serving."""

from __future__ import annotations

import socket
from pathlib import Path

import gguf
import numpy as np
import pytest

from jepa_server.check import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    return rc, capsys.readouterr().out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_servable_setup_passes(tiny_vit_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(capsys, "-m", tiny_vit_path, "--port", str(_free_port()))
    assert rc == 0 and "ready" in out and "a jepa GGUF (family" in out, out
    rc, out = _run(capsys, "--warm", "-m", tiny_vit_path, "--port", "0")
    assert rc == 0 and "one encode ran" in out, out


def test_each_problem_fails_with_its_reason(
    tiny_vit_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = str(_free_port())
    rc, out = _run(capsys, "-m", str(tmp_path / "missing.gguf"), "--port", port)
    assert rc == 1 and "No such file" in out, out
    rc, out = _run(capsys, "-m", str(tmp_path), "--port", port)
    assert rc == 1 and "not a regular file" in out, out
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(Path(tiny_vit_path).read_bytes()[:-4096])
    rc, out = _run(capsys, "-m", str(truncated), "--port", port)
    assert rc == 1 and ("truncated" in out or "not a readable GGUF" in out), out
    other = tmp_path / "llama.gguf"
    w = gguf.GGUFWriter(str(other), "llama")
    w.add_tensor("x", np.zeros(4, np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    rc, out = _run(capsys, "-m", str(other), "--port", port)
    assert rc == 1 and "not 'jepa'" in out, out
    rc, out = _run(capsys, "-m", tiny_vit_path, "--port", port, "--files-root", str(tmp_path / "nowhere"))
    assert rc == 1 and "files root" in out, out
    config = tmp_path / "bad.toml"
    config.write_text("no_such_setting = 1\n")
    rc, out = _run(capsys, "--config", str(config))
    assert rc == 1 and "FAIL settings" in out, out


def test_a_taken_port_fails(tiny_vit_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        rc, out = _run(capsys, "-m", tiny_vit_path, "--port", str(s.getsockname()[1]))
    assert rc == 1 and "in use" in out, out


def test_warm_fails_a_model_that_loads_its_header_but_cannot_serve(
    tiny_vit_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file whose header is fine but a required tensor is missing: the header check passes, the
    warm load names the problem."""
    r = gguf.GGUFReader(tiny_vit_path)
    broken = tmp_path / "no-norm.gguf"
    w = gguf.GGUFWriter(str(broken), "jepa")
    for field in r.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    for t in r.tensors:
        if t.name != "enc.norm.weight":
            w.add_tensor(t.name, np.asarray(t.data).reshape(tuple(reversed(t.shape.tolist()))))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    rc, out = _run(capsys, "-m", str(broken), "--port", "0")
    assert rc == 0, out  # the header alone is a valid jepa file
    rc, out = _run(capsys, "--warm", "-m", str(broken), "--port", "0")
    assert rc == 1 and "cannot serve" in out and "enc.norm.weight" in out, out


def test_the_console_script_runs_it(tiny_vit_path: str) -> None:
    """`jepa-server check` is the server's own command (what the systemd unit's ExecStartPre runs)."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "jepa_server", "check", "-m", tiny_vit_path, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "ready" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "jepa_server", "check", "-m", "/nonexistent.gguf"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "FAIL" in r.stdout, r.stdout + r.stderr


def _with_keys(src: str, dst: Path, **values: int) -> str:
    """A copy of the GGUF file `src` with some u32 keys changed (jepa_pre_crop= for jepa.pre.crop):
    how a file written by an older converter, or by hand, can contradict itself."""
    changes = {k.replace("_", ".", 2): v for k, v in values.items()}
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(dst), "jepa")
    for field in r.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        if field.name in changes:
            w.add_uint32(field.name, changes[field.name])
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(t.data).reshape(tuple(reversed(t.shape.tolist()))))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return str(dst)


RECIPE_VS_MODEL = ("the preprocessing recipe makes 224x224 px inputs (jepa.pre.crop 224), but the model's "
                   "position table covers 32x32 px (jepa.enc.img_size 32)")


def test_a_recipe_the_model_refuses_fails(
    tiny_vit_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 32 px model whose recipe makes 224 px inputs (what converting an HF ViT without its
    preprocessor_config.json used to write): it loads, and refuses every request."""
    bad = _with_keys(tiny_vit_path, tmp_path / "bad.gguf", jepa_pre_crop=224, jepa_pre_resize_short=224)
    rc, out = _run(capsys, "-m", bad, "--port", "0")
    assert rc == 1 and f"FAIL model {bad}: {RECIPE_VS_MODEL}" in out, out
    rc, out = _run(capsys, "--warm", "-m", bad, "--port", "0")
    assert rc == 1 and RECIPE_VS_MODEL in out, out
    fine = _with_keys(tiny_vit_path, tmp_path / "fine.gguf", jepa_pre_resize_short=40)  # crop 32: servable
    rc, out = _run(capsys, "--warm", "-m", fine, "--port", "0")
    assert rc == 0, out


def test_a_rope_model_takes_any_multiple_of_its_patch(
    tiny_vjepa2_encoder_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import jepa

    info = jepa.Model(tiny_vjepa2_encoder_path).info
    p, img = int(info.patch_size), int(info.img_size)
    other = _with_keys(tiny_vjepa2_encoder_path, tmp_path / "other.gguf", jepa_pre_crop=img + p,
                       jepa_pre_resize_short=img + p)
    rc, out = _run(capsys, "-m", other, "--port", "0")
    assert rc == 0, out
    odd = _with_keys(tiny_vjepa2_encoder_path, tmp_path / "odd.gguf", jepa_pre_crop=img + 1,
                     jepa_pre_resize_short=img + 1)
    rc, out = _run(capsys, "-m", odd, "--port", "0")
    assert rc == 1 and f"not a multiple of the model's patch size {p}" in out, out


def test_the_server_refuses_to_load_it_with_the_same_reason(tiny_vit_path: str, tmp_path: Path) -> None:
    """The load path's smoke test fails such a file (503 naming both sizes) rather than serving a
    model that refuses every request."""
    from test_server_support import image_item, in_process, run

    models = tmp_path / "models"
    models.mkdir()
    _with_keys(tiny_vit_path, models / "bad.gguf", jepa_pre_crop=224, jepa_pre_resize_short=224)

    async def body() -> None:
        async with in_process(models_dir=str(models)) as (client, _app):
            r = await client.post("/v1/embeddings", json={"model": "bad", "input": image_item(1)})
            err = (await r.json())["error"]
            assert r.status == 503 and err["code"] == "model_load_failed", err
            assert "smoke test" in err["message"] and RECIPE_VS_MODEL in err["message"], err

    run(body)


@pytest.mark.parametrize("key", ["general.architecture", "jepa.family"])
def test_a_string_key_that_is_not_utf8_fails_naming_it(
    key: str, tiny_vit_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a UnicodeDecodeError traceback from gguf-py. Now the engine's own words for it."""
    from gguf_forge import with_bad_string

    bad = with_bad_string(tiny_vit_path, tmp_path / "bad.gguf", key)
    rc, out = _run(capsys, "-m", bad, "--port", "0")
    assert rc == 1, out
    assert f"FAIL model {bad}: metadata key {key}: not valid UTF-8 (byte 0xff at offset 0)" in out, out


def test_a_bad_tensor_name_fails_naming_it(
    tiny_vit_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gguf_forge import with_bad_tensor_name

    bad = with_bad_tensor_name(tiny_vit_path, tmp_path / "bad.gguf", "enc.norm.weight")
    rc, out = _run(capsys, "-m", bad, "--port", "0")
    assert rc == 1 and '("\\xffnc.norm.weight"): the tensor\'s name is not valid UTF-8' in out, out


def test_a_header_of_three_million_strings_is_read_in_seconds(
    tiny_vit_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file the engine loads in about 2 s (an array key of 3,000,000 short strings): gguf-py's
    full parse took 69 s here (then a SystemError on some builds). The bounded reader takes about
    1.5 s; the bound is generous for a loaded machine."""
    import time

    from gguf_forge import with_string_array

    big = with_string_array(tiny_vit_path, tmp_path / "big.gguf", 3_000_000)
    t0 = time.perf_counter()
    rc, out = _run(capsys, "-m", big, "--port", "0")
    took = time.perf_counter() - t0
    assert rc == 0 and "a jepa GGUF (family hfvit, 70 tensors)" in out, out
    assert took < 10, f"{took:.1f} s"


def test_a_directory_of_5000_models_is_checked_in_seconds(
    tiny_vit_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: 19 s for 5000 demo files (gguf-py maps and parses each); now about 3 s."""
    import os
    import time

    d = tmp_path / "models"
    d.mkdir()
    for i in range(5000):
        os.symlink(tiny_vit_path, d / f"m{i:04d}.gguf")
    t0 = time.perf_counter()
    rc, out = _run(capsys, "--models-dir", str(d), "--port", "0")
    took = time.perf_counter() - t0
    assert rc == 0 and "5000 model(s)" in out and out.count("a jepa GGUF (family hfvit") == 5000, out[-2000:]
    assert took < 10, f"{took:.1f} s"


def test_a_fifo_is_not_opened_and_a_bad_header_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    os.mkfifo(tmp_path / "pipe.gguf")
    rc, out = _run(capsys, "-m", str(tmp_path / "pipe.gguf"), "--port", "0")
    assert rc == 1 and "not a regular file" in out, out
    (tmp_path / "short.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    rc, out = _run(capsys, "-m", str(tmp_path / "short.gguf"), "--port", "0")
    assert rc == 1 and "metadata keys, more than this reader's budget" in out, out
