"""jepa-quantize IN.gguf OUT.gguf --type TYPE [--keep PATTERN ...] [--dry-run] [--verbose]."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..convert.quantize import TYPES, plan, quantize
from ..errors import JepaError


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="jepa-quantize",
        description="Store a jepa GGUF file's weight matrices in another type, with ggml's own quantization "
        "(norms, biases, tokens and tables stay as they are; every key and label is carried over).",
    )
    p.add_argument("src", help="input GGUF (f32, f16 or bf16 weights)")
    p.add_argument("dst", nargs="?", help="output GGUF (not needed with --dry-run)")
    p.add_argument("--type", required=True, choices=TYPES, help="the weight matrices' type")
    p.add_argument(
        "--keep", action="append", default=[], metavar="PATTERN",
        help="a glob of tensor names to leave as they are (repeatable), e.g. 'head.*' or 'enc.blk.0.*'",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and the output size; write nothing")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print every tensor (name, shape, type before and after, why) before the summary")
    args = p.parse_args(argv)
    if not args.dry_run and not args.dst:
        p.error("give the output file (or --dry-run)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = plan(args.src, args.type, args.keep) if args.dry_run else quantize(
            args.src, args.dst, args.type, args.keep
        )
    except JepaError as exc:  # every bad input or output path, named in the message
        print(f"jepa-quantize: error: {exc}", file=sys.stderr)
        return 2
    print(result.describe(args.verbose))
    if not args.dry_run:
        print(f"wrote {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
