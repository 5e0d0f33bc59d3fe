"""Settings: one declaration, flags over environment over file over defaults, checked values, and
the docs table rendered from the declaration."""

from __future__ import annotations

import dataclasses
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jepa_server.settings import (
    MAX_BATCH_SERVED,
    MAX_CONFIG_BYTES,
    Settings,
    SettingsError,
    env_name,
    load_settings,
    settings_table,
)

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_are_the_documented_ones() -> None:
    s = Settings()
    assert (s.host, s.port, s.workers, s.max_batch, s.max_wait_ms) == ("127.0.0.1", 8080, 1, 8, 5.0)
    assert (s.max_items, s.max_frames, s.max_body_mb, s.max_concurrent_requests) == (2048, 128, 32.0, 64)
    assert s.api_key is None and not s.local_files and s.device == "cpu"


def test_flags_override_env_which_overrides_the_file(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text("max_batch = 4\nworkers = 2\nmax_items = 10\nallow_local_files = true\n")
    env = {"JEPA_WORKERS": "3", "JEPA_MAX_ITEMS": "20"}
    s = load_settings(["--config", str(config), "--max-items", "30", "--demo"], env)
    assert (s.max_batch, s.workers, s.max_items) == (4, 3, 30)  # file, env, flag
    assert s.allow_local_files and s.demo
    # An unset flag leaves the env value alone.
    assert load_settings([], {"JEPA_PORT": "0"}).port == 0


def test_gpu_flag_alone_means_device_zero() -> None:
    assert load_settings(["--gpu"], {}).device == "cuda:0"
    assert load_settings(["--gpu", "1"], {}).device == "cuda:1"
    assert load_settings([], {}).gpu is None


def test_model_name_is_model_id() -> None:
    # jepa.cpp's clients start servers with --model-name: the same setting as --model-id.
    assert load_settings(["--model-name", "vit-s"], {}).model_id == "vit-s"
    assert load_settings(["--model-id", "vit-s"], {}).model_id == "vit-s"
    assert load_settings(["--model-name", "flag"], {"JEPA_MODEL_ID": "env"}).model_id == "flag"


def test_files_root_implies_local_files() -> None:
    assert Settings(files_root="/srv").local_files


@pytest.mark.parametrize(
    "values",
    [
        {"max_batch": 0},
        {"max_batch": MAX_BATCH_SERVED + 1},
        {"workers": 0},
        {"port": 70000},
        {"max_wait_ms": -1.0},
        {"max_items": 0},
        {"queue_timeout_s": -1.0},
        {"api_key": ""},
        {"workers": "2"},  # a string where an int belongs (from a config file)
        {"allow_local_files": 1},
    ],
)
def test_bad_values_are_refused(values: dict[str, object]) -> None:
    with pytest.raises(SettingsError):
        Settings(**values)  # type: ignore[arg-type]


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="unknown setting 'max_batches'"):
        Settings.from_mapping({"max_batches": 4})
    config = tmp_path / "bad.toml"
    config.write_text("mxa_items = 3\n")
    with pytest.raises(SettingsError, match="mxa_items"):
        load_settings(["--config", str(config)], {})
    with pytest.raises(SettingsError, match="cannot read the config file"):
        load_settings(["--config", str(tmp_path / "missing.toml")], {})


def test_env_values_are_typed() -> None:
    with pytest.raises(SettingsError, match="JEPA_WORKERS"):
        load_settings([], {"JEPA_WORKERS": "many"})
    assert load_settings([], {"JEPA_ALLOW_LOCAL_FILES": "yes"}).allow_local_files
    assert load_settings([], {"JEPA_MAX_WAIT_MS": "0"}).max_wait_ms == 0.0


def test_settings_are_frozen_and_hide_the_key() -> None:
    s = Settings(api_key="s3cret")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.port = 1  # type: ignore[misc]
    assert "s3cret" not in repr(s)


def test_every_setting_has_a_flag_env_and_row() -> None:
    table = settings_table()
    for f in dataclasses.fields(Settings):
        assert f.metadata["flags"] and f.metadata["help"]
        assert f"`{f.metadata['flags'][-1]}`" in table
        assert f"`{env_name(f.name)}`" in table


def test_docs_table_is_rendered_from_the_declaration() -> None:
    """docs/serving.md's settings table is the serving-settings block tools/render_docs.py renders
    from settings_table() (test_docs_current runs its --check)."""
    text = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    block = text.split("<!-- BEGIN GENERATED: serving-settings -->\n", 1)[1].split("<!-- END GENERATED", 1)[0]
    assert block == settings_table() + "\n"


def test_the_servers_batch_bound_is_within_the_engines() -> None:
    """--max-batch's bound is the server's own (a latency bound, one histogram bucket per size); it
    may never exceed what an engine context takes."""
    from jepa import _engine
    from jepa_server.settings import MAX_BATCH_SERVED

    assert 1 <= MAX_BATCH_SERVED <= _engine.MAX_BATCH_LIMIT
    assert _engine.context_default_params().max_batch <= _engine.MAX_BATCH_LIMIT


def test_help_names_the_subcommands() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "jepa_server", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Serve one" not in out.stdout and "--models-dir" in out.stdout
    assert "jepa-server info" in out.stdout and "jepa-server check" in out.stdout
    for sub in ("info", "check"):
        cmd = [sys.executable, "-m", "jepa_server", sub, "--help"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0 and f"jepa-server {sub}" in r.stdout, r.stderr


# -- issue 21: values that are not numbers, files that are not files ----------------------------------

_FLOATS = [f.name for f in dataclasses.fields(Settings) if f.type in ("float", float)]


def test_every_float_setting_is_in_the_finite_check() -> None:
    assert len(_FLOATS) >= 12 and "max_body_mb" in _FLOATS and "keep_alive_s" in _FLOATS


@pytest.mark.parametrize("name", _FLOATS)
@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_nan_and_infinity_are_refused_from_flags_env_and_file(name: str, text: str, tmp_path: Path) -> None:
    """Every float setting refuses nan and infinity, naming the setting, from each of the three
    sources (before: 12 of 13 took them: startup tracebacks, 500s, /info as invalid JSON)."""
    flag = next(f for f in dataclasses.fields(Settings) if f.name == name).metadata["flags"][-1]
    config = tmp_path / "s.toml"
    config.write_text(f"{name} = {text}\n")  # TOML's own nan / inf / -inf
    sources = (([f"{flag}={text}"], {}), ([], {env_name(name): text}), (["--config", str(config)], {}))
    for argv, env in sources:
        with pytest.raises(SettingsError, match=f"{name} .*finite"):
            load_settings(argv, env)


def _jepa_server(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """`jepa-server ARGS` with its address space capped (a config read that fills memory fails fast
    instead of taking the machine's)."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run([sys.executable, "-m", "jepa_server", *args], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=cap)


def test_a_nan_flag_exits_2_naming_the_setting() -> None:
    out = _jepa_server("--demo", "--port", "0", "--max-body-mb", "nan")
    assert out.returncode == 2 and "max_body_mb (--max-body-mb) must be a finite number" in out.stderr, out


def test_a_config_that_is_a_fifo_a_device_or_huge_exits_2(tmp_path: Path) -> None:
    """--config reads a regular file of at most MAX_CONFIG_BYTES only (before: a FIFO hung startup,
    /dev/zero raised MemoryError)."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    not_a_file = "not a regular file"
    cases = ((fifo, not_a_file), ("/dev/zero", not_a_file), (tmp_path, not_a_file),
             (big, f"a settings file is at most {MAX_CONFIG_BYTES}"))
    for path, why in cases:
        started = time.monotonic()
        try:
            out = _jepa_server("--demo", "--port", "0", "--config", str(path), timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"--config {path}: startup hung")
        assert out.returncode == 2 and why in out.stderr, (path, out.returncode, out.stderr[-500:])
        assert time.monotonic() - started < 30
    with pytest.raises(SettingsError, match="not a regular file"):
        load_settings(["--config", str(fifo)], {})


def test_a_config_nested_too_deeply_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Issue 36, M8: a --config with arrays nested 500 deep ended startup in a RecursionError traceback."""
    deep = tmp_path / "deep.toml"
    deep.write_text("port = 8080\nx = " + "[" * 500 + "]" * 500 + "\n")
    with pytest.raises(SettingsError, match="nested more than 32 deep"):
        load_settings(["--config", str(deep)], {})
    out = _jepa_server("--demo", "--port", "0", "--config", str(deep), timeout=30)
    assert out.returncode == 2 and "nested more than 32 deep" in out.stderr, out.stderr[-500:]
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("key", ["two words", "line\nbreak", "tab\tkey", "clé", "trailing "])
def test_an_api_key_no_client_can_send_is_refused(key: str) -> None:
    """Issue 36, L16: a key with a space, a newline or a non-ASCII character started a server that
    no client could ever authenticate to."""
    with pytest.raises(SettingsError, match="api_key must be visible ASCII"):
        load_settings(["--demo", "--api-key", key], {})
    with pytest.raises(SettingsError, match="api_key must be visible ASCII"):
        load_settings(["--demo"], {"JEPA_API_KEY": key})
    assert load_settings(["--demo", "--api-key", "sk-Ab3_x.y~z!"], {}).api_key == "sk-Ab3_x.y~z!"
