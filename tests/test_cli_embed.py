"""jepa-embed through a subprocess: outputs bit-identical to jepa.embed, input expansion, bad inputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
import skimage.data
from PIL import Image

import jepa
from jepa.cli.embed import Entry, expand, natural_key
from jepa.pipeline import embed

from conftest import bits

pytestmark = pytest.mark.every_path


@pytest.fixture(scope="module")
def ctx(tiny_vit_path: str) -> jepa.Context:
    return jepa.Model(tiny_vit_path).context()


def save(path: Path, a: np.ndarray, **kw: object) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(a).save(path, **kw)
    return str(path)


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    """photos/{a.jpg, b10.png, b9.webp, sub/c.bmp, .hidden.jpg, notes.txt}."""
    root = tmp_path / "photos"
    save(root / "a.jpg", skimage.data.chelsea(), quality=90)
    save(root / "b10.png", skimage.data.coffee()[::2, ::2])
    save(root / "b9.webp", skimage.data.rocket()[100:300, 50:400], lossless=True)
    save(root / "sub" / "c.bmp", skimage.data.astronaut()[::4, ::4])
    save(root / ".hidden.jpg", skimage.data.camera())
    (root / "notes.txt").write_text("not media")
    return root


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jepa.cli.embed", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )



def test_npy_is_bit_identical_to_embed_in_input_order(
    tiny_vit_path: str, ctx: jepa.Context, photos: Path, tmp_path: Path
) -> None:
    files = [str(photos / n) for n in ("b9.webp", "a.jpg", "sub/c.bmp", "b10.png")]
    ref = embed(ctx, files)
    for extra in ([], ["--batch", "3", "-t", "1"]):
        out = tmp_path / "out.npy"
        r = run("-m", tiny_vit_path, *files, "-o", str(out), "--quiet", *extra)
        assert r.returncode == 0, r.stderr
        got = np.load(out)
        assert got.shape == (4, 192)
        assert np.array_equal(bits(got), bits(ref))


def test_npz_walks_a_directory_recursively_in_natural_order(
    tiny_vit_path: str, ctx: jepa.Context, photos: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.npz"
    r = run("-m", tiny_vit_path, str(photos), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert f"wrote [4, 192] to {out}" in r.stderr
    with np.load(out) as z:
        names, vectors = z["names"].tolist(), z["vectors"]
    assert names == [str(photos / n) for n in ("a.jpg", "b9.webp", "b10.png", "sub/c.bmp")]
    assert np.array_equal(bits(vectors), bits(embed(ctx, names)))


def test_globs_and_pool_none(tiny_vit_path: str, ctx: jepa.Context, photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "tokens.npy"
    globs = [str(photos / "b*"), str(photos / "**" / "*.bmp")]
    r = run("-m", tiny_vit_path, *globs, "--pool", "none", "-o", str(out))
    assert r.returncode == 0, r.stderr
    files = [str(photos / n) for n in ("b9.webp", "b10.png", "sub/c.bmp")]
    got = np.load(out)
    assert got.shape == (3, 5, 192)  # CLS + 2x2 patches
    assert np.array_equal(bits(got), bits(embed(ctx, files, pool="none")))


def test_text_output_round_trips(tiny_vit_path: str, ctx: jepa.Context, photos: Path) -> None:
    r = run("-m", tiny_vit_path, "a.jpg", "b10.png", "--pool", "mean", cwd=photos)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln.split("\t")[0] for ln in lines] == ["a.jpg", "b10.png"]
    got = np.array([[np.float32(v) for v in ln.split("\t")[1].split()] for ln in lines], np.float32)
    assert np.array_equal(bits(got), bits(embed(ctx, [photos / "a.jpg", photos / "b10.png"], pool="mean")))


def test_a_video_file_is_one_item(tiny_vit_path: str, ctx: jepa.Context, tmp_path: Path) -> None:
    path = tmp_path / "clip.mp4"
    with av.open(str(path), mode="w") as c:
        s = c.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        for i in range(5):
            c.mux(
                s.encode(av.VideoFrame.from_ndarray(np.full((48, 64, 3), 40 * i, np.uint8), format="rgb24"))
            )
        c.mux(s.encode())
    out = tmp_path / "v.npy"
    r = run("-m", tiny_vit_path, str(path), "-o", str(out), "-q")
    assert r.returncode == 0, r.stderr
    assert np.array_equal(bits(np.load(out)), bits(embed(ctx, [path])))  # an image model: its first frame


def test_a_bad_file_stops_the_run(tiny_vit_path: str, photos: Path, tmp_path: Path) -> None:
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    out = tmp_path / "out.npy"
    r = run("-m", tiny_vit_path, str(photos / "a.jpg"), str(photos / "broken.jpg"), "-o", str(out))
    assert r.returncode == 1
    assert f"error: {photos / 'broken.jpg'}: " in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()


def test_keep_going_writes_the_rest_with_their_names(
    tiny_vit_path: str, ctx: jepa.Context, photos: Path, tmp_path: Path
) -> None:
    (photos / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    truncated = photos / "half.jpg"
    data = (photos / "a.jpg").read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out.npz"
    args = [
        str(photos / "b10.png"),
        str(photos / "broken.png"),
        str(photos / "nope.jpg"),
        str(photos / "zz*.jpg"),
    ]
    r = run("-m", tiny_vit_path, *args, str(truncated), str(photos / "a.jpg"), "-o", str(out), "--keep-going")
    assert r.returncode == 0, r.stderr
    for bad, why in [
        ("broken.png", "corrupt image header"),
        ("nope.jpg", "no such file or directory"),
        ("zz*.jpg", "no file matches"),
        ("half.jpg", "truncated"),
    ]:
        assert f"skipped {photos / bad}: " in r.stderr and why in r.stderr
    assert "skipped 4 bad input(s)" in r.stderr
    with np.load(out) as z:
        names, vectors = z["names"].tolist(), z["vectors"]
    assert names == [str(photos / "b10.png"), str(photos / "a.jpg")]
    assert np.array_equal(bits(vectors), bits(embed(ctx, names)))


def test_nothing_good_is_an_error(tiny_vit_path: str, tmp_path: Path) -> None:
    r = run("-m", tiny_vit_path, str(tmp_path / "missing.png"), "-o", str(tmp_path / "o.npy"), "--keep-going")
    assert r.returncode == 1 and "nothing to write" in r.stderr
    assert not (tmp_path / "o.npy").exists()


def test_a_clip_for_an_image_model_is_a_bad_input(tiny_vit_path: str, photos: Path, tmp_path: Path) -> None:
    r = run("-m", tiny_vit_path, str(photos / "sub"), str(photos), "--clip", "-o", str(tmp_path / "x.npy"))
    assert r.returncode == 1
    assert f"error: {photos}: a clip of 3 frames needs a video model" in r.stderr


@pytest.mark.parametrize("content", [None, b"GGUF but not really", b"\x00" * 64])
def test_a_bad_model_is_exit_2_without_a_traceback(
    tmp_path: Path, photos: Path, content: bytes | None
) -> None:
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    r = run("-m", str(path), str(photos / "a.jpg"))
    assert r.returncode == 2
    assert f"error: cannot load model {str(path)!r}" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "out.txt"], "-o must end in .npy or .npz"),
        (["--pool", "none"], "--pool none"),
        (["--clip", "--as-images"], "not allowed with"),
        (["--frames", "0"], "positive integer"),
        (["--pool", "max"], "invalid choice"),
    ],
)
def test_usage_errors_are_exit_2(photos: Path, args: list[str], message: str) -> None:
    r = run("-m", "model.gguf", str(photos / "a.jpg"), *args)
    assert r.returncode == 2 and message in r.stderr


def test_expand_directories_into_images_or_clips(tmp_path: Path) -> None:
    root = tmp_path / "v"
    for rel in ("f1.jpg", "f2.jpg", "f10.jpg", "z.mp4", "s/a.png", "s/b.png", "t/x.mp4", ".h/q.png"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"")
    j = lambda *p: str(root.joinpath(*p))  # noqa: E731
    assert expand([str(root)], clips=False) == [
        Entry(j(n), j(n)) for n in ("f1.jpg", "f2.jpg", "f10.jpg", "z.mp4", "s/a.png", "s/b.png", "t/x.mp4")
    ]
    assert expand([str(root)], clips=True) == [
        Entry(str(root), [j("f1.jpg"), j("f2.jpg"), j("f10.jpg")]),
        Entry(j("z.mp4"), j("z.mp4")),
        Entry(j("s"), [j("s/a.png"), j("s/b.png")]),
        Entry(j("t/x.mp4"), j("t/x.mp4")),
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert expand([str(empty)], clips=False) == [
        Entry(str(empty), str(empty), "no image or video files in the directory")
    ]
    assert sorted(["f10", "f2", "f1"], key=natural_key) == ["f1", "f2", "f10"]


def test_console_script_is_declared() -> None:
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "jepa-embed"]
    assert ep.value == "jepa.cli.embed:main"


def test_progress_bar_stays_off_when_stderr_is_not_a_terminal(
    tiny_vit_path: str, photos: Path, tmp_path: Path
) -> None:
    r = run("-m", tiny_vit_path, str(photos / "a.jpg"), "-o", str(tmp_path / "o.npy"))
    assert r.returncode == 0
    assert "it/s" not in r.stderr and "item/s" not in r.stderr and "%|" not in r.stderr
    r = run("-m", tiny_vit_path, str(photos / "a.jpg"), "-o", str(tmp_path / "o.npy"), "--quiet")
    assert r.returncode == 0 and r.stderr == ""


def test_batch_default_is_the_engines() -> None:
    """jepa-embed's --batch default is jepa_context_default_params().max_batch, not a literal."""
    from jepa import _engine
    from jepa.cli.embed import parse_args

    assert parse_args(["-m", "x.gguf", "a.png"]).batch == _engine.context_default_params().max_batch


def test_fifos_devices_and_huge_files_are_refused_in_one_line(tiny_vit_path: str, tmp_path: Path) -> None:
    """Image and video inputs: jepa.media opens only regular files (non-blocking, fstat'ed), and
    jepa-embed reads an image file of at most MAX_IMAGE_FILE_BYTES. Before: a 200 GiB sparse .png
    was read whole (a MemoryError traceback)."""
    import os

    from jepa.cli.embed import MAX_IMAGE_FILE_BYTES

    os.mkfifo(tmp_path / "pipe.png")
    os.mkfifo(tmp_path / "pipe.mp4")
    os.symlink("/dev/zero", tmp_path / "zero.png")
    os.symlink("/dev/zero", tmp_path / "zero.mp4")
    huge = tmp_path / "huge.png"
    with open(huge, "wb") as f:
        f.truncate(200 << 30)  # sparse: no disk used
    for name in ("pipe.png", "pipe.mp4", "zero.png", "zero.mp4"):
        r = run("-m", tiny_vit_path, str(tmp_path / name))
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip() == (f"jepa-embed: error: {tmp_path / name}: not a regular file (a FIFO, a "
                                    f"device or a socket): {str(tmp_path / name)!r}"), r.stderr
    r = run("-m", tiny_vit_path, str(huge))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == (f"jepa-embed: error: {huge}: the file is {200 << 30} bytes; at most "
                                f"{MAX_IMAGE_FILE_BYTES} are read per input (jepa-embed reads an image file "
                                f"of at most {MAX_IMAGE_FILE_BYTES >> 20} MiB)"), r.stderr
