"""`jepa-server info` (the resolved configuration with each value's source, the devices, the
servable models from their headers, nothing loaded), the repeatable -m through every settings
source, and the one-line answer of a package installed without the server extra."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jepa_server.info_cmd import main
from jepa_server.settings import SettingsError, load_settings, resolve_settings


def _info(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    assert main(["--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_info_tells_each_setting_and_where_it_came_from(
    tiny_vit_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "jepa.toml"
    config.write_text("max_batch = 16\nworkers = 2\n")
    monkeypatch.setenv("JEPA_WORKERS", "3")
    monkeypatch.setenv("JEPA_API_KEY", "s3cret")
    r = _info(capsys, "-m", tiny_vit_path, "--config", str(config), "--port", "9000")
    s = r["settings"]
    assert s["port"] == {"value": 9000, "from": "flag"}
    assert s["workers"] == {"value": 3, "from": "env JEPA_WORKERS"}
    assert s["max_batch"] == {"value": 16, "from": f"config {config}"}
    assert s["max_wait_ms"]["from"] == "default"
    assert s["api_key"]["value"] == "(set)" and "s3cret" not in json.dumps(r)
    assert r["devices"][0]["device"] == "cpu" and r["devices"][0]["serves"] is True
    (model,) = r["models"]
    assert model["id"] == "vit32" and model["pinned"]
    assert model["family"] == "hfvit" and model["dtype"] == "f32"
    assert r["default_model"] == "vit32"


def test_info_lists_a_models_dir_without_loading_and_names_a_bad_file(
    tiny_vit_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "models"
    d.mkdir()
    (d / "good.gguf").write_bytes(Path(tiny_vit_path).read_bytes())
    (d / "bad.gguf").write_bytes(b"GGUF not really")
    r = _info(capsys, "--models-dir", str(d))
    rows = {m["id"]: m for m in r["models"]}
    assert set(rows) == {"good", "bad"} and not rows["good"]["pinned"]
    assert rows["good"]["family"] == "hfvit" and "error" in rows["bad"]
    assert r["default_model"] is None
    assert main(["--models-dir", str(d)]) == 0  # the text form prints too
    out = capsys.readouterr().out
    assert "good" in out and "on demand" in out and "bad.gguf" in out


def test_model_repeats_through_flags_environment_and_config(tmp_path: Path) -> None:
    assert load_settings(["-m", "a.gguf", "-m", "b.gguf"], env={}).model == ("a.gguf", "b.gguf")
    assert load_settings([], env={"JEPA_MODEL": "a.gguf, b.gguf"}).model == ("a.gguf", "b.gguf")
    config = tmp_path / "c.toml"
    config.write_text('model = ["x.gguf", "y.gguf"]\n')
    s, src = resolve_settings(["--config", str(config)], env={})
    assert s.model == ("x.gguf", "y.gguf") and src["model"] == f"config {config}"
    s, src = resolve_settings(["--config", str(config), "-m", "z.gguf"], env={"JEPA_MODEL": "e.gguf"})
    assert s.model == ("z.gguf",) and src["model"] == "flag"
    with pytest.raises(SettingsError, match="model-id"):
        load_settings(["-m", "a.gguf", "-m", "b.gguf", "--model-id", "x"], env={})
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"model = '\xe9.gguf'\n")
    with pytest.raises(SettingsError, match="cannot read the config file"):
        load_settings(["--config", str(bad)], env={})
    with pytest.raises(SettingsError, match="--gpu or --devices"):
        load_settings(["--gpu", "0", "--devices", "cpu"], env={})
    assert load_settings(["--devices", "cpu, cuda:1"], env={}).device_list == ("cpu", "cuda:1")


def test_the_command_without_the_server_extra_says_so_in_one_line() -> None:
    """aiohttp made unimportable (as in `pip install jepa` alone): one line naming the extra, exit 1,
    no traceback."""
    code = (
        "import sys; sys.modules['aiohttp'] = None; "
        "from jepa_server.__main__ import main; sys.exit(main(['--demo']))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'jepa[server]'" in lines[0] and "aiohttp" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_the_console_script_runs_info(tiny_vit_path: str) -> None:
    r = subprocess.run([sys.executable, "-m", "jepa_server", "info", "-m", tiny_vit_path],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "vit32" in r.stdout and "configuration" in r.stdout, r.stderr


def test_info_reads_a_huge_header_and_a_large_directory_in_seconds(
    tiny_vit_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before (gguf-py's full parse): 47 s for a header of 3,000,000 strings, 21 s for 5000 demo
    files. The bounded reader: about 1 s and 3 s."""
    import os
    import time

    from gguf_forge import with_string_array

    big = with_string_array(tiny_vit_path, tmp_path / "big.gguf", 3_000_000)
    t0 = time.perf_counter()
    (row,) = _info(capsys, "-m", big)["models"]
    assert row["family"] == "hfvit" and row["tensors"] == 70 and "error" not in row, row
    assert time.perf_counter() - t0 < 10
    d = tmp_path / "models"
    d.mkdir()
    for i in range(5000):
        os.symlink(tiny_vit_path, d / f"m{i:04d}.gguf")
    t0 = time.perf_counter()
    rows = _info(capsys, "--models-dir", str(d))["models"]
    assert len(rows) == 5000 and all(r["family"] == "hfvit" for r in rows)
    assert time.perf_counter() - t0 < 10


def test_info_names_what_is_wrong_with_a_header(
    tiny_vit_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    import gguf
    import numpy as np
    from gguf_forge import with_bad_string

    bad = with_bad_string(tiny_vit_path, tmp_path / "bad.gguf", "jepa.family")
    other = tmp_path / "llama.gguf"
    w = gguf.GGUFWriter(str(other), "llama")
    w.add_tensor("x", np.zeros(4, np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    os.mkfifo(tmp_path / "pipe.gguf")
    r = _info(capsys, "-m", bad, "-m", str(other), "-m", str(tmp_path / "pipe.gguf"))
    errors = [m.get("error") for m in r["models"]]
    assert errors == ["metadata key jepa.family: not valid UTF-8 (byte 0xff at offset 0)",
                      "general.architecture is 'llama', not 'jepa'", "not a regular file"], errors
