"""general.file_type's names, declared once (jepa.gguf.keys.FILE_TYPES) and read by the writer,
jepa-quantize and the server: the numbers are llama.cpp's, and a file jepa-quantize writes is shown
by its type's name wherever a model is (the catalog, `jepa-server info`, /info, the startup line),
never as `type18`."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import pytest
from test_server_support import http, server_process

from jepa.cli.quantize import main as quantize_main
from jepa.convert.quantize import TYPES
from jepa.demo import write_demo_model
from jepa.gguf.header import read_header
from jepa.gguf.keys import FILE_TYPE_NAMES, FILE_TYPES
from jepa.gguf.schema import FTYPES
from jepa_server.catalog import dtype_name
from jepa_server.info_cmd import main as info_main

K_QUANTS = ("q6_k", "q5_k")  # the two the server's own copy of the table once lacked
WIDE = dict(embed_dim=256, n_layer=1, n_head=4, img_size=32)  # 256-wide rows: the k-quants apply


def _llama_member(name: str) -> str:
    """The LlamaFileType member of one of our names: ALL_F32, else MOSTLY_<TYPE>; a k-quant with
    a mix takes the one llama.cpp's tools call by the bare name (Q4_K is Q4_K_M)."""
    if name == "f32":
        return "ALL_F32"
    return f"MOSTLY_{name.upper()}" + ("_M" if name in ("q4_k", "q5_k") else "")


# The project's own types: numbered from 1000 on, where llama.cpp's never reach.
OWN_TYPES = {"i8c"}


def test_the_numbers_are_llama_cpps() -> None:
    ggml = {name: n for name, n in FILE_TYPES.items() if name not in OWN_TYPES}
    assert {name: int(gguf.LlamaFileType[_llama_member(name)]) for name in ggml} == ggml
    assert all(FILE_TYPES[name] >= 1000 for name in OWN_TYPES)
    # llama.cpp's numbers never reach ours (GUESSED, 1024, marks a file it typed by guessing).
    assert max(int(t) for t in gguf.LlamaFileType if t.name != "GUESSED") < 1000
    assert len(FILE_TYPE_NAMES) == len(FILE_TYPES)  # one name per number, so a number reads back


def test_every_type_the_tools_write_has_a_name() -> None:
    assert set(FTYPES) <= set(FILE_TYPES)  # jepa-convert's --ftype
    assert set(TYPES) <= set(FILE_TYPES)  # jepa-quantize's --type
    assert dtype_name(FILE_TYPES["q6_k"]) == "q6_k" and dtype_name(99) == "type99"


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A tiny f32 model, and jepa-quantize's q6_k and q5_k files of it (by the command)."""
    d = tmp_path_factory.mktemp("file-types")
    src = write_demo_model(d / "f32.gguf", **WIDE)
    out = {}
    for t in K_QUANTS:
        out[t] = str(d / f"m-{t}.gguf")
        assert quantize_main([src, out[t], "--type", t]) == 0
    return out


@pytest.mark.parametrize("type", K_QUANTS)
def test_the_header_and_jepa_server_info_name_it(
    type: str, quantized: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = quantized[type]
    assert read_header(path, ["general.file_type"]).get("general.file_type") == FILE_TYPES[type]
    capsys.readouterr()
    assert info_main(["--json", "-m", path]) == 0
    (row,) = json.loads(capsys.readouterr().out)["models"]
    assert row["dtype"] == type, row


@pytest.mark.parametrize("type", K_QUANTS)
def test_the_server_names_it_in_info_and_at_startup(type: str, quantized: dict[str, str]) -> None:
    name = Path(quantized[type]).name
    with server_process("-m", quantized[type], "--port", "0") as s:
        (model,) = http(s.url + "/info").json()["models"]
        assert (model["file"], model["dtype"]) == (name, type), model
        assert f"({name}) · family hfvit · dtype {type} ·" in s.startup[0], s.startup
