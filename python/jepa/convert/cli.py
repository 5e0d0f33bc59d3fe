"""The `jepa-convert` command: a checkpoint, or the demo model, to a GGUF file."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..gguf.schema import FTYPES
from . import FAMILIES, convert


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jepa-convert",
        description="Convert a JEPA vision checkpoint or a BERT-style text encoder (HF ViTModel / "
        "IJepaModel / VJEPA2Model / VJEPA2ForVideoClassification safetensors, a timm-layout ViT such as "
        "LeJEPA, or a Meta V-JEPA 2 .pt encoder, a V-JEPA 2-AC .pt world model or a LeWM weights.pt + "
        "config.json, a transformers BertModel / XLMRobertaModel or sentence-transformers directory) to a "
        "jepa GGUF file.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--src", type=Path,
                     help="checkpoint directory (config.json + safetensors), a .safetensors file or a "
                     "Meta .pt file")
    src.add_argument("--demo", action="store_true", help="write the tiny random-weight demo model instead")
    p.add_argument("--out", type=Path, required=True, help="GGUF file to write")
    p.add_argument("--family", choices=FAMILIES, default="auto", help="source family (default: detect)")
    p.add_argument("--ftype", choices=FTYPES, default="f32",
                   help="f16 / bf16 store the attention, FFN and projection matrices in 16 bits (IEEE "
                   "half or bfloat16, rounded to nearest even); norms, biases, tokens and the patch "
                   "embedding stay f32")
    p.add_argument("--name", help="general.name (default: the model card's \"# name\" heading, else the "
                   "checkpoint directory's name, or its nearest ancestor's when that is generic: model, a "
                   "Hub snapshot hash)")
    p.add_argument("--n-head", type=int,
                   help="attention heads, for timm and Meta .pt checkpoints without a config.json")
    p.add_argument("--img-size", type=int,
                   help="native image size of a V-JEPA 2-AC .pt checkpoint (default 256)")
    p.add_argument("--head-dim", type=int,
                   help="attention head width of a V-JEPA 2-AC .pt checkpoint (default 64, every release)")
    p.add_argument("--pred-n-head", type=int,
                   help="predictor attention heads of a V-JEPA 2.1 .pt checkpoint without a config.json "
                   "(default: 12 at width 384)")
    p.add_argument("--pooling", choices=("cls", "mean", "last_token"),
                   help="text models: how a sequence becomes one vector; required when the checkpoint does "
                   "not say (a plain transformers directory), and overrides a sentence-transformers Pooling "
                   "module")
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                   help="text models: L2-normalise the pooled vectors (default: whether a "
                   "sentence-transformers directory has a Normalize module)")
    p.add_argument("--max-seq-len", type=int,
                   help="text models: tokens per text after truncation (default: the checkpoint's "
                   "max_seq_length)")
    p.add_argument("--license", help="general.license (default: the model card's license, if any)")
    p.add_argument("--source-url", help="general.source_url")
    p.add_argument("--description", help="general.description")
    p.add_argument("--seed", type=int, default=0, help="random seed of the demo model")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # The converters' notes (where the preprocessing recipe came from) go to stderr, one line each.
    log = logging.getLogger("jepa.convert")
    note = logging.StreamHandler(sys.stderr)
    note.setFormatter(logging.Formatter("jepa-convert: %(message)s"))
    level = log.level
    log.addHandler(note)
    log.setLevel(logging.INFO)
    try:
        if args.demo:
            from ..demo import write_demo_model

            out = write_demo_model(args.out, seed=args.seed, ftype=args.ftype)
        else:
            out = convert(
                args.src, args.out, family=args.family, ftype=args.ftype, name=args.name, n_head=args.n_head,
                license=args.license, source_url=args.source_url, description=args.description,
                img_size=args.img_size, head_dim=args.head_dim, pred_n_head=args.pred_n_head,
                pooling=args.pooling,
                normalize=args.normalize, max_seq_len=args.max_seq_len,
            )
    except (ValueError, OSError) as exc:
        print(f"jepa-convert: error: {exc}", file=sys.stderr)
        return 1
    finally:
        log.removeHandler(note)
        log.setLevel(level)
    print(f"wrote {out} ({Path(out).stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
