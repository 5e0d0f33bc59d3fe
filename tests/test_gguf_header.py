"""jepa.gguf.header: the bounded GGUF header reader `jepa-server check` / `info` and
jepa-quantize read files with. It agrees with gguf-py on valid files, names what is wrong with a bad
one in the engine's words, refuses a header over its budget, and raises nothing but ModelFileError /
ResourceLimitError on any mutation of a valid file."""

from __future__ import annotations

import contextlib
import os
import random
import struct
from pathlib import Path

import gguf
import pytest

import jepa
from jepa.errors import ModelFileError, ResourceLimitError
from jepa.gguf import header as gguf_header
from jepa.gguf.header import Limits, read_header


def _gguf_py(path: str) -> tuple[dict[str, object], list[tuple[str, int, tuple[int, ...], int]], int]:
    r = gguf.GGUFReader(path)
    keys = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    tensors = [(t.name, int(t.tensor_type), tuple(int(n) for n in t.shape),
                int(t.data_offset) - r.data_offset) for t in r.tensors]
    return keys, tensors, int(r.data_offset)


@pytest.mark.parametrize("fixture", ["tiny_vit_path", "tiny_vjepa2_path", "tiny_ac_path"])
def test_it_reads_what_gguf_py_reads(fixture: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(fixture)
    keys, tensors, data_offset = _gguf_py(path)
    h = read_header(path, keys)
    assert h.values.keys() == keys.keys()
    for k, v in keys.items():
        got = h.values[k]
        assert got == pytest.approx(v) if isinstance(v, float | list) else got == v, k
    assert [(t.name, t.type, t.shape, t.offset) for t in h.tensors] == tensors
    assert h.data_offset == data_offset and h.file_size == os.path.getsize(path)
    assert h.data_end <= h.file_size < h.data_end + 32  # the last tensor's padding
    assert read_header(path).values == {}  # nothing asked, nothing kept


def test_quantized_files_have_their_extent(tiny_vit_path: str, tmp_path: Path) -> None:
    from jepa.convert.quantize import quantize

    for t in ("q8_0", "q4_k", "bf16"):
        out = quantize(tiny_vit_path, tmp_path / f"{t}.gguf", t)
        h = read_header(tmp_path / f"{t}.gguf")
        assert h.data_end <= h.file_size < h.data_end + 32, (t, out)


def test_a_truncated_file_is_named_truncated(tiny_vit_path: str, tmp_path: Path) -> None:
    data = Path(tiny_vit_path).read_bytes()
    h = read_header(tiny_vit_path)
    cut = tmp_path / "cut.gguf"
    for n in (0, 3, 10, 30, 1000, h.data_offset - 32):  # the padding is under 32 bytes
        cut.write_bytes(data[:n])
        with pytest.raises(ModelFileError, match=r"truncated|not a GGUF file") as e:
            read_header(cut)
        assert str(e.value), n
    cut.write_bytes(data[:-4096])  # the header is whole: the data section is short
    h = read_header(cut)
    assert h.data_end > h.file_size


def test_budgets_are_refused_naming_the_limit(tiny_vjepa2_path: str, tmp_path: Path) -> None:
    from gguf_forge import with_string_array

    with pytest.raises(ResourceLimitError, match="metadata keys, more than this reader's budget of 10"):
        read_header(tiny_vjepa2_path, limits=Limits(n_kv=10))
    with pytest.raises(ResourceLimitError, match="tensors, more than this reader's budget of 5"):
        read_header(tiny_vjepa2_path, limits=Limits(n_tensors=5))
    with pytest.raises(ResourceLimitError, match="header is larger than this reader's budget"):
        read_header(tiny_vjepa2_path, limits=Limits(header_bytes=1 << 10))
    many = with_string_array(tiny_vjepa2_path, tmp_path / "many.gguf", 1600)
    with pytest.raises(ResourceLimitError, match=r"x\.junk00: the header's string arrays hold more than "
                                                 r"this reader's budget of 1000 strings"):
        read_header(many, limits=Limits(array_strings=1000))
    with pytest.raises(ResourceLimitError, match=r"general\.name: a string of"):
        read_header(many, ["general.name"], limits=Limits(value_bytes=4))
    assert read_header(many, limits=Limits(array_strings=1700)).n_kv > 0  # 1600 and any labels


def test_strings_are_checked_across_windows(
    tiny_vit_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tiny windows: every string straddles one at some point; a bad byte deep in an array is found
    and named by its index, a long string no one asked for is checked too."""
    from gguf_forge import with_string_array

    monkeypatch.setattr(gguf_header, "_FIRST", 7)
    monkeypatch.setattr(gguf_header, "_WINDOW", 13)
    ok = with_string_array(tiny_vit_path, tmp_path / "ok.gguf", 32, b"\xc3\xa9\xc3\xa9ab")  # 'ééab'
    assert read_header(ok, ["general.name"]).values["general.name"].startswith("jepa-demo")
    data = bytearray(Path(ok).read_bytes())
    i = data.index(b"\xc3\xa9\xc3\xa9ab" * 1) + 14 * 20  # entry 20's first byte
    data[i] = 0xFF
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match=r"metadata key x\.junk00\[20\]: not valid UTF-8 \(byte 0xff at "
                                             r"offset 0\)"):
        read_header(tmp_path / "bad.gguf")
    w = gguf.GGUFWriter(str(tmp_path / "long.gguf"), "jepa")
    w.add_string("x.long", "é" * 100 + "x")
    w.write_header_to_file(), w.write_kv_data_to_file(), w.close()
    data = bytearray((tmp_path / "long.gguf").read_bytes())
    at = data.index("é".encode() * 100)
    for cut, byte in ((151, 0xC3), (150, 0xFF), (13, 0xC3), (199, 0xC3)):  # 13-byte windows: 13 straddles
        bad = bytearray(data)
        bad[at + cut] = 0xFF
        (tmp_path / "long.gguf").write_bytes(bytes(bad))
        start = cut - (cut % 2)
        with pytest.raises(ModelFileError) as e:
            read_header(tmp_path / "long.gguf")
        assert str(e.value) == f"metadata key x.long: not valid UTF-8 (byte 0x{byte:02x} at offset {start})"


def test_what_the_engine_refuses_it_refuses_in_the_same_words(tiny_vit_path: str, tmp_path: Path) -> None:
    from gguf_forge import with_bad_string, with_bad_tensor_name

    for bad in (with_bad_string(tiny_vit_path, tmp_path / "a.gguf", "general.architecture"),
                with_bad_string(tiny_vit_path, tmp_path / "b.gguf", "general.name"),
                with_bad_tensor_name(tiny_vit_path, tmp_path / "c.gguf", "enc.norm.weight")):
        with pytest.raises(ModelFileError) as ours:
            read_header(bad)
        with pytest.raises(jepa.ModelFileError) as engine:
            jepa.Model(bad)
        assert str(ours.value) == str(engine.value)


def test_not_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.gguf")
    for path in (tmp_path / "pipe.gguf", tmp_path, Path("/dev/zero")):
        with pytest.raises(ModelFileError, match="not a regular file"):
            read_header(path)
    with pytest.raises(ModelFileError, match="cannot open: No such file"):
        read_header(tmp_path / "missing.gguf")


def _kv(key: bytes, vtype: int, payload: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype) + payload


def test_malformed_values(tmp_path: Path) -> None:
    def header(*kvs: bytes, n_tensors: int = 0, version: int = 3) -> Path:
        p = tmp_path / "h.gguf"
        p.write_bytes(b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs)) + b"".join(kvs))
        return p

    with pytest.raises(ModelFileError, match="GGUF version 1; this reader takes 2 and 3"):
        read_header(header(version=1))
    with pytest.raises(ModelFileError, match="x: unknown value type 13"):
        read_header(header(_kv(b"x", 13, b"")))
    with pytest.raises(ModelFileError, match="x: arrays of arrays are not GGUF"):
        read_header(header(_kv(b"x", 9, struct.pack("<IQ", 9, 1))))
    with pytest.raises(ModelFileError, match="x: given twice"):
        read_header(header(_kv(b"x", 4, b"\0" * 4), _kv(b"x", 4, b"\0" * 4)))
    with pytest.raises(ModelFileError, match=r"general\.alignment: 3 is not a power of two"):
        read_header(header(_kv(b"general.alignment", 4, struct.pack("<I", 3))))
    with pytest.raises(ModelFileError, match=r"metadata key #0 \(\"\\xffx\"\): the metadata key's name"):
        read_header(header(_kv(b"\xffx", 4, b"\0" * 4)))
    with pytest.raises(ModelFileError, match="truncated"):  # a length past the end of the file
        read_header(header(_kv(b"x", 8, struct.pack("<Q", 1 << 60))))
    ti = struct.pack("<Q", 1) + b"t" + struct.pack("<I", 5)
    p = tmp_path / "t.gguf"
    p.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + ti)
    with pytest.raises(ModelFileError, match="tensor t: 5 dimensions"):
        read_header(p)
    p.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + ti[:-4] + struct.pack("<IQIQ", 1, 4, 99, 0))
    with pytest.raises(ModelFileError, match="tensor t: unknown ggml type 99"):
        read_header(p)
    p.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + ti[:-4] + struct.pack("<IQIQ", 1, 33, 8, 0))
    with pytest.raises(ModelFileError, match="tensor t: 33 values per row are not whole blocks of 32"):
        read_header(p)


def test_any_mutation_raises_only_the_typed_errors(tiny_vjepa2_path: str) -> None:
    """A seeded mutation sweep (byte flips, overwritten lengths, truncations) over a real header:
    every outcome is a Header or a ModelFileError / ResourceLimitError, never another exception."""
    import tempfile

    data = Path(tiny_vjepa2_path).read_bytes()
    end = read_header(tiny_vjepa2_path).data_offset
    rng = random.Random(0)
    keys = list(_gguf_py(tiny_vjepa2_path)[0])
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.gguf"
        for i in range(2000):
            b = bytearray(data[: end + 64])
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(end)
                if i % 3 == 0:
                    b[at] = rng.randrange(256)
                elif i % 3 == 1:
                    b[at : at + 8] = struct.pack("<Q", rng.choice([0, 1, 2**31, 2**32 + 5, 2**63, 2**64 - 1]))
                else:
                    del b[at:]
                    break
            p.write_bytes(bytes(b))
            with contextlib.suppress(ModelFileError, ResourceLimitError):
                read_header(p, keys)
