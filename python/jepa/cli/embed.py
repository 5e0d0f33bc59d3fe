"""jepa-embed: embed images, frame folders and video files with a GGUF model, into .npy, .npz or text.

Runs jepa.media.prepare and jepa.pipeline.encode_prepared, the pipeline `jepa.embed` is made of, so its
vectors are bit-identical to `jepa.embed` on the same inputs."""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from ..model import CONTEXT_DEFAULTS

PROG = "jepa-embed"
EXIT_BAD_INPUT = 1
EXIT_USAGE = 2
# The largest image file read (it is read whole; a video is streamed and has no such limit). Any image
# jepa.media.MAX_PIXELS lets through fits, even uncompressed at 16 bits per channel with alpha.
MAX_IMAGE_FILE_BYTES = 1 << 30


@dataclass(frozen=True)
class Entry:
    """One output row: a file, or the frames of a clip, or an input that named nothing."""

    name: str
    item: str | list[str]
    error: str | None = None


class Stop(Exception):
    """A bad input without --keep-going: report it and exit non-zero."""


def natural_key(name: str) -> list[Any]:
    """Sort key that puts frame2 before frame10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _walk(root: str) -> Iterator[tuple[str, list[str]]]:
    """(directory, its media files) for root and its subdirectories, sorted, hidden ones skipped."""
    from ..media import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS

    media = IMAGE_EXTENSIONS | VIDEO_EXTENSIONS
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted((d for d in dirs if not d.startswith(".")), key=natural_key)
        keep = [f for f in files if not f.startswith(".") and os.path.splitext(f)[1].lower() in media]
        yield top, [os.path.join(top, f) for f in sorted(keep, key=natural_key)]


def expand_dir(root: str, clips: bool) -> list[Entry]:
    """A directory's media files, recursively; with clips, each directory's images are one clip."""
    from ..media import VIDEO_EXTENSIONS

    entries: list[Entry] = []
    for top, files in _walk(root):
        frames = [f for f in files if os.path.splitext(f)[1].lower() not in VIDEO_EXTENSIONS]
        if clips and frames:
            entries.append(Entry(top, frames))
        for f in files:
            if not (clips and f in frames):
                entries.append(Entry(f, f))
    return entries or [Entry(root, root, "no image or video files in the directory")]


def expand(inputs: Sequence[str], clips: bool) -> list[Entry]:
    """Command-line inputs -> entries in input order: files, directories (recursive), globs."""
    entries: list[Entry] = []
    for arg in inputs:
        if os.path.isdir(arg):
            entries += expand_dir(arg, clips)
        elif os.path.exists(arg):
            entries.append(Entry(arg, arg))
        elif any(c in arg for c in "*?["):
            matches = sorted(glob.glob(arg, recursive=True), key=natural_key)
            if not matches:
                entries.append(Entry(arg, arg, "no file matches this pattern"))
            for m in matches:
                entries += expand_dir(m, clips) if os.path.isdir(m) else [Entry(m, m)]
        else:
            entries.append(Entry(arg, arg, "no such file or directory"))
    return entries


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Embed images, frame folders and video files, or texts (a text model: --text, .txt and "
        ".jsonl files), with a jepa GGUF model.",
        epilog="Exit status: 0 done, 1 a bad input (or nothing could be embedded), 2 bad usage or model.",
    )
    p.add_argument("-m", "--model", required=True, metavar="MODEL.gguf", help="the GGUF model file")
    p.add_argument(
        "inputs", nargs="*", metavar="INPUT",
        help="image or video files, directories (recursive), globs; for a text model .txt (a text per line) "
        "and .jsonl (a JSON string or {\"text\": ...} per line) files",
    )
    p.add_argument(
        "--text", action="append", metavar="TEXT", help="a text to embed (text models; repeatable)"
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="out.npy (vectors) or out.npz (vectors and names); default: text",
    )
    p.add_argument(
        "--pool", choices=("mean", "cls", "none", "last_token", "levels"),
        help="default: cls if the model has one, else mean; a text model's default is its file's pooling; "
        "levels: a V-JEPA 2.1 model's four levels side by side, each the mean of the patch tokens",
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--clip",
        action="store_true",
        help="each directory's images are one clip (the default for a video model)",
    )
    group.add_argument(
        "--as-images", action="store_true", help="each image is one item (the default for an image model)"
    )
    p.add_argument(
        "--frames",
        type=_positive,
        help="frames sampled per video (default: the model's) or clip (default: all)",
    )
    batch = CONTEXT_DEFAULTS.max_batch
    p.add_argument("--batch", type=_positive, default=batch, help=f"items per encode (default {batch})")
    p.add_argument("-t", "--threads", type=_positive, help="compute threads (default: the CPUs it may use)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--keep-going", action="store_true", help="report bad inputs and embed the rest")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")
    args = p.parse_args(argv)
    if not args.inputs and not args.text:
        p.error("give at least one INPUT (or --text for a text model)")
    if args.output and os.path.splitext(args.output)[1].lower() not in (".npy", ".npz"):
        p.error(f"-o must end in .npy or .npz, got {args.output!r}")
    if args.pool == "none" and not args.output:
        p.error("--pool none writes [n, tokens, dim]: give -o out.npy or out.npz")
    return args


class Run:
    """One jepa-embed run: entries in, rows and names out, bad inputs reported."""

    def __init__(self, args: argparse.Namespace, model: Any, bar: Any) -> None:
        self.args, self.model, self.bar = args, model, bar
        self.names: list[str] = []
        self.rows: list[np.ndarray] = []
        self.skipped = 0

    def say(self, msg: str) -> None:
        self.bar.write(f"{PROG}: {msg}", file=sys.stderr)

    def bad(self, entry: Entry, reason: str) -> None:
        if not self.args.keep_going:
            raise Stop(f"error: {entry.name}: {reason}")
        self.skipped += 1
        self.say(f"skipped {entry.name}: {reason}")

    def chunk(self, ctx: Any, entries: Sequence[Entry]) -> None:
        from ..errors import JepaError
        from ..media import VIDEO_EXTENSIONS, Budget, prepare
        from ..pipeline import encode_prepared

        images = Budget(max_input_bytes=MAX_IMAGE_FILE_BYTES, names={
            "max_input_bytes": f"jepa-embed reads an image file of at most {MAX_IMAGE_FILE_BYTES >> 20} MiB"})
        ready: list[tuple[Entry, np.ndarray]] = []
        for e in entries:
            if e.error:
                self.bad(e, e.error)
                continue
            video = isinstance(e.item, str) and os.path.splitext(e.item)[1].lower() in VIDEO_EXTENSIONS
            try:
                ready.append((e, prepare(e.item, self.model, frames=self.args.frames,
                                         budget=None if video else images)))
            except JepaError as err:
                self.bad(e, err.message)
        try:
            rows = encode_prepared(ctx, [x for _, x in ready], self.args.pool)
        except JepaError as err:
            if not self.args.keep_going or len(ready) == 1:
                raise Stop(f"error: {err.message}") from None
            # Find the culprit one item at a time: a row's bits do not depend on its batch.
            for e, x in ready:
                try:
                    self.keep(e, encode_prepared(ctx, [x], self.args.pool)[0])
                except JepaError as one:
                    self.bad(e, one.message)
            return
        for (e, _), row in zip(ready, rows, strict=True):
            self.keep(e, row)

    def keep(self, entry: Entry, row: np.ndarray) -> None:
        self.names.append(entry.name)
        self.rows.append(row)


def _write(path: str | None, names: list[str], vectors: np.ndarray, out: IO[str]) -> None:
    if path is None:
        for name, row in zip(names, vectors, strict=True):
            out.write(name + "\t" + " ".join(str(v) for v in row) + "\n")  # str(np.float32) round-trips
        return
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            if path.lower().endswith(".npz"):
                np.savez(f, vectors=vectors, names=np.array(names, dtype=str))
            else:
                np.save(f, vectors)
        os.replace(tmp, path)  # no half-written file under the final name
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..errors import JepaError
    from ..model import Model
    from ..pipeline import stack_rows

    try:
        model = Model(args.model, device=args.device)
    except (JepaError, OSError) as e:
        print(f"{PROG}: error: cannot load model {args.model!r}: {e}", file=sys.stderr)
        return EXIT_USAGE
    if model.is_text:
        from .embed_text import run_text

        return run_text(args, model, lambda names, vectors: _finish(args, names, vectors, 0))
    if args.text:
        print(f"{PROG}: error: --text needs a text model; this is an {model.info.modality} model",
              file=sys.stderr)
        return EXIT_USAGE
    clips = args.clip or (not args.as_images and model.info.modality == "video")
    entries = expand(args.inputs, clips)
    show = not args.quiet and sys.stderr.isatty()
    with tqdm(total=len(entries), disable=not show, file=sys.stderr, unit="item", dynamic_ncols=True) as bar:
        job = Run(args, model, bar)
        try:
            ctx = model.context(threads=args.threads, max_batch=args.batch)
            for start in range(0, len(entries), ctx.max_batch):
                job.chunk(ctx, entries[start : start + ctx.max_batch])
                bar.update(min(ctx.max_batch, len(entries) - start))
            vectors = stack_rows(job.rows, model, args.pool)
        except (Stop, JepaError) as e:
            print(f"{PROG}: {e if isinstance(e, Stop) else 'error: ' + e.message}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if not job.rows:
        print(f"{PROG}: error: nothing to write: every input was bad", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _finish(args, job.names, vectors, job.skipped)


def _finish(args: argparse.Namespace, names: list[str], vectors: np.ndarray, skipped: int) -> int:
    """Write the rows (-o or text on stdout) and say what was written."""
    try:
        _write(args.output, names, vectors, sys.stdout)
    except OSError as e:
        print(f"{PROG}: error: cannot write {args.output!r}: {e.strerror or e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not args.quiet and args.output:
        note = f", skipped {skipped} bad input(s)" if skipped else ""
        print(f"{PROG}: wrote {list(vectors.shape)} to {args.output}{note}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `jepa-embed ... | head`: the reader left, nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
