"""jepa-embed on a text model: --text strings and .txt / .jsonl files, the rows jepa.text gives (bit for
bit), truncation reported, and every bad input a clear error with exit status 1 (2 for bad usage)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import jepa
from jepa.cli.embed import main
from jepa.testing.random_text import write_random_bert
from jepa.text import embed_text

pytestmark = pytest.mark.every_path


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_random_bert(tmp_path_factory.mktemp("m") / "t.gguf", max_seq_len=16)


def test_texts_and_files_in_order(
    model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.txt").write_text("hello world\n\n  \nthe quick brown fox\n")
    (tmp_path / "b.jsonl").write_text('"cat"\n\n{"text": "a dog photo", "id": 7}\n')
    out = tmp_path / "v.npz"
    long = " ".join(["seven"] * 30)
    rc = main(
        [
            "-m",
            model_path,
            "--text",
            "one two",
            "--text",
            long,
            str(tmp_path / "a.txt"),
            str(tmp_path / "b.jsonl"),
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    assert "1 text(s) truncated to 16 tokens (first: text[1])" in err
    data = np.load(out)
    names = list(data["names"])
    assert names == [
        "text[0]",
        "text[1]",
        f"{tmp_path}/a.txt:1",
        f"{tmp_path}/a.txt:4",
        f"{tmp_path}/b.jsonl:1",
        f"{tmp_path}/b.jsonl:3",
    ]
    want = embed_text(
        jepa.Model(model_path).context(),
        ["one two", long, "hello world", "the quick brown fox", "cat", "a dog photo"],
    )
    assert np.array_equal(data["vectors"].view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize(
    ("args", "files", "rc", "words"),
    [
        (["--text", ""], {}, 1, "text[0] is an empty string"),
        (["x.png"], {"x.png": b"\x89PNG"}, 1, "reads .txt or .jsonl"),
        (["bad.jsonl"], {"bad.jsonl": b"{not json\n"}, 1, "bad.jsonl:1: not JSON"),
        (["bad.jsonl"], {"bad.jsonl": b'{"txt": 1}\n'}, 1, 'an object with a "text" string'),
        (["latin.txt"], {"latin.txt": b"ok\ncaf\xe9\n"}, 1,
         "latin.txt:2: not UTF-8 text (byte 0xe9 at offset 6"),
        (["missing.txt"], {}, 1, "no such file"),
        (
            ["--pool", "none", "--text", "a", "-o", "o.npy"],
            {},
            2,
            "--pool none is for image and video models",
        ),
    ],
)
def test_bad_inputs(
    model_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    files: dict[str, bytes],
    rc: int,
    words: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert main(["-m", model_path, *args]) == rc
    assert words in capsys.readouterr().err


def test_text_needs_a_text_model(tiny_vit_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-m", tiny_vit_path, "--text", "a cat"]) == 2
    assert "--text needs a text model; this is an image model" in capsys.readouterr().err


def _embed_in_child(*argv: str, timeout: float = 60) -> tuple[int, str]:
    """jepa-embed in a child process (a hang or a MemoryError must fail the test, not the run)."""
    import os
    import subprocess
    import sys

    code = "import sys; from jepa.cli.embed import main; sys.exit(main(sys.argv[1:]))"
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return r.returncode, r.stderr


def test_a_text_file_must_be_a_small_regular_file(model_path: str, tmp_path: Path) -> None:
    """Before: a FIFO named .txt hung the run and a .txt symlink to /dev/zero ran into a MemoryError.
    Only a regular file is read (opened non-blocking, fstat'ed), of at most MAX_TEXT_FILE_BYTES."""
    import os

    from jepa.cli.embed_text import MAX_TEXT_FILE_BYTES

    os.mkfifo(tmp_path / "pipe.txt")
    os.symlink("/dev/zero", tmp_path / "zero.txt")
    os.mkdir(tmp_path / "dir.jsonl")
    for name in ("pipe.txt", "zero.txt", "dir.jsonl"):
        rc, err = _embed_in_child("-m", model_path, str(tmp_path / name))
        lines = err.strip().splitlines()
        assert rc == 1 and len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith(f"jepa-embed: error: {tmp_path / name}: "), err
        assert ("a directory" if name == "dir.jsonl" else "not a regular file") in lines[0], err
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(MAX_TEXT_FILE_BYTES + 1)  # sparse: no disk used
    rc, err = _embed_in_child("-m", model_path, str(big))
    assert rc == 1 and err.strip() == (
        f"jepa-embed: error: {big}: {MAX_TEXT_FILE_BYTES + 1} bytes, over the limit of "
        f"{MAX_TEXT_FILE_BYTES} bytes ({MAX_TEXT_FILE_BYTES >> 20} MiB) a text file may hold"), err


def test_text_files_keep_their_lines(
    model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read whole, a file still gives one text per line, CRLF and CR lines too, with its line numbers."""
    (tmp_path / "a.txt").write_bytes(b"one\r\ntwo\rthree\n\nfour")
    out = tmp_path / "v.npz"
    assert main(["-m", model_path, "-q", "-o", str(out), str(tmp_path / "a.txt")]) == 0
    names = list(np.load(out)["names"])
    assert names == [f"{tmp_path / 'a.txt'}:{n}" for n in (1, 2, 3, 5)]
