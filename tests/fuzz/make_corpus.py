"""Write the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/) and the GGUF dictionary
(tests/fuzz/gguf.dict). The committed corpora are this script's output; rerun it after a schema
change (`make fuzz-corpus`).

- gguf: a tiny valid file of every family and kind, from the project's own writers (a few KB each:
  8 or 12 wide, one layer, 8 px), plus truncated and forged variants;
- media: a tiny image in every format jepa.media promises, an animated GIF and an mp4, each with the
  mode byte fuzz_media.py reads first, plus truncated variants;
- request: request bodies of every endpoint, with the engine byte fuzz_request.py reads first.

Files named regress-* are inputs the fuzzers found (docs/fuzzing.md), kept by hand: this script
leaves them in place.

    python tests/fuzz/make_corpus.py
"""

from __future__ import annotations

import base64
import io
import json
import random
import struct
from collections.abc import Callable
from pathlib import Path

from jepa.demo import write_demo_model
from jepa.gguf.keys import KEYS
from jepa.gguf.schema import Encoder, Meta, Preprocess
from jepa.testing.random_levjepa import write_random_levjepa
from jepa.testing.random_text import write_random_bert
from jepa.testing.random_vjepa2 import write_random_vjepa2
from jepa.testing.random_weights import write_random_file
from jepa.testing.random_world import write_random_ac, write_random_lewm

HERE = Path(__file__).resolve().parent
PRE = Preprocess(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), resize_short=8, crop=8)


def _image(path: Path, family: str, **enc: object) -> None:
    sizes: dict[str, object] = {"embed_dim": 8, "n_layer": 1, "n_head": 2, "ffn_dim": 16, "patch_size": 4}
    e = Encoder(**{**sizes, "img_size": 8, **enc})  # type: ignore[arg-type]
    write_random_file(path, Meta(family=family, name=f"fuzz-{family}"), e, PRE, [], seed=1, ftype="f32")


# name -> writer of one tiny valid file
VALID: dict[str, Callable[[Path], object]] = {
    "hfvit": lambda p: write_demo_model(p, embed_dim=8, n_layer=1, n_head=2, patch_size=4, img_size=8),
    "hfvit-f16": lambda p: write_demo_model(p, embed_dim=8, n_layer=1, n_head=2, patch_size=4, img_size=8,
                                            ftype="f16"),
    "ijepa": lambda p: _image(p, "ijepa", cls_token=False, pos_type="sincos2d"),
    "levjepa": lambda p: _image(p, "levjepa", qkv_fused=True, n_registers=2, layer_scale=True,
                                act="gelu_tanh"),
    # 3-D RoPE needs an even head width >= 6: 12 wide, 2 heads.
    "levjepa-video": lambda p: write_random_levjepa(p, embed_dim=12, n_layer=1, n_head=2, patch_size=4,
                                                    img_size=8, n_frames=2),
    "vjepa2": lambda p: write_random_vjepa2(p, embed_dim=12, n_layer=1, n_head=2, patch_size=4, img_size=8,
                                            n_frames=2, predictor={"embed_dim": 12, "n_head": 2},
                                            head={"n_classes": 3}),
    "vjepa2-ac": lambda p: write_random_ac(p, embed_dim=12, n_layer=1, n_head=2, enc_dim=12, enc_heads=2,
                                           patch_size=4, img_size=8, n_frames=2),
    "lewm": lambda p: write_random_lewm(p, enc_dim=8, enc_layers=1, enc_heads=2, patch_size=4, img_size=8,
                                        embed_dim=8, n_layer=1, n_head=2, head_dim=6, ffn_dim=16, n_frames=2,
                                        action_dim=2, proj_hidden=8),
    "bert": lambda p: write_random_bert(p, embed_dim=8, n_layer=1, n_head=2, ffn_dim=16, n_positions=10,
                                        max_seq_len=8, pos_offset=2),
}


def _forge_string(data: bytes, key: str, value: bytes) -> bytes:
    """The file with string key `key`'s value replaced (its length prefix rewritten)."""
    k = key.encode()
    at = data.index(struct.pack("<Q", len(k)) + k + struct.pack("<i", 8)) + 8 + len(k) + 4
    (n,) = struct.unpack_from("<Q", data, at)
    return data[:at] + struct.pack("<Q", len(value)) + value + data[at + 8 + n:]


def forged(valid: bytes) -> dict[str, bytes]:
    """Hostile variants of one valid file: cut short, lying counts, bad strings."""
    (n_kv,) = struct.unpack_from("<Q", valid, 16)
    out = {
        "truncated-header": valid[:20],
        "truncated-kv": valid[: len(valid) // 8],
        "truncated-data": valid[: len(valid) - 7],
        "n-tensors-huge": valid[:8] + struct.pack("<Q", 1 << 62) + valid[16:],
        "n-kv-plus-one": valid[:16] + struct.pack("<Q", n_kv + 1) + valid[24:],
        "name-not-utf8": _forge_string(valid, "general.name", b"caf\xe9"),
        "family-unknown": _forge_string(valid, "jepa.family", b"vjepa9"),
        "family-not-utf8": _forge_string(valid, "jepa.family", b"\xffvit"),
    }
    return out


def write_dict(path: Path) -> None:
    """libFuzzer dictionary: every key the schema declares, the enum values, and GGUF's magic."""
    words = {"GGUF", "general.architecture", "general.name", "jepa", "jepa.schema_version",
             "jepa.head.labels"}
    for k in KEYS:
        words.add(k.name)
        for v in k.allowed or ():
            if isinstance(v, str):
                words.add(v)
    lines = [f'"{w}"' for w in sorted(words)]
    # GGUF type ids as the i32 they are written as (string 8, array 9, u32 4, f32 6, bool 7).
    lines += [f'"\\x{t:02x}\\x00\\x00\\x00"' for t in (4, 6, 7, 8, 9)]
    head = "# GGUF keys and values of the jepa schema (tests/fuzz/make_corpus.py)\n"
    path.write_text(head + "\n".join(lines) + "\n")


def gguf_corpus(out: Path) -> None:
    for name, write in VALID.items():
        write(out / f"{name}.gguf")
    demo = (out / "hfvit.gguf").read_bytes()
    for name, data in forged(demo).items():
        (out / f"hfvit-{name}.gguf").write_bytes(data)


def _images() -> dict[str, bytes]:
    """A 12x10 image with some structure, in each format the pipeline decodes."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(3)
    img = Image.fromarray(rng.integers(0, 255, (10, 12, 3), dtype=np.uint8))
    out = {}
    for fmt, ext, extra in (("PNG", "png", {}), ("JPEG", "jpg", {"quality": 60}), ("BMP", "bmp", {}),
                            ("WEBP", "webp", {"quality": 50}), ("TIFF", "tiff", {}), ("GIF", "gif", {})):
        buf = io.BytesIO()
        img.save(buf, fmt, **extra)
        out[ext] = buf.getvalue()
    buf = io.BytesIO()
    frames = [img.rotate(90 * k) for k in range(3)]
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=40, loop=0)
    out["animated.gif"] = buf.getvalue()
    buf = io.BytesIO()
    img.convert("LA").save(buf, "PNG")  # grey + alpha: a conversion path
    out["la.png"] = buf.getvalue()
    return out


def _mp4() -> bytes:
    """Four 16x16 frames of H.264 (or MPEG-4 Part 2 where the encoder lacks H.264)."""
    import av
    import numpy as np

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as c:
        try:
            s = c.add_stream("libx264", rate=4)
        except Exception:  # an FFmpeg build without x264
            s = c.add_stream("mpeg4", rate=4)
        s.width = s.height = 16
        s.pix_fmt = "yuv420p"
        for k in range(4):
            a = np.full((16, 16, 3), 40 * k, np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return buf.getvalue()


def media_corpus(out: Path) -> None:
    files = _images()
    files["mp4"] = _mp4()
    for name, data in files.items():
        # Mode byte (fuzz_media.py): bit 0 the model (image / video), then as_video, then frames.
        for mode in (0, 1) if name not in ("mp4", "animated.gif") else (1, 3, 1 | (2 << 3)):
            (out / f"{name}.{mode}").write_bytes(bytes([mode]) + data)
        (out / f"{name}.cut").write_bytes(bytes([1]) + data[: len(data) // 2])
    (out / "tiny.png").write_bytes(files["png"])  # fuzz_request.py's one file under its root


def request_corpus(out: Path, png: bytes) -> None:
    b64 = base64.b64encode(png).decode()
    bodies = {
        "embeddings": {"model": "fuzz", "input": [{"b64": b64}], "encoding_format": "base64",
                       "dimensions": 4},
        "embed-path": {"inputs": ["a.png", {"path": "a.png"}], "normalize": True},
        "embeddings-frames": {"input": {"frames": [{"b64": b64}, "a.png"]}, "pool": "mean"},
        "embeddings-video": {"input": {"video": {"b64": b64}, "frames": 2}},
        "classify": {"input": [{"b64": "data:image/png;base64," + b64}], "top_k": 3},
        "rollout-actions": {"context": [{"b64": b64}], "actions": [[[0.1] * 7] * 2], "state": [[0.0] * 7]},
        "rollout-lewm": {"context": [{"b64": b64}], "actions": [[0.5, -0.5]] * 2, "return_latents": True},
        "rollout-plan": {"context": [{"b64": b64}], "goal": {"b64": b64}, "state": [0.0] * 7,
                         "plan": {"samples": 8, "topk": 2, "cem_steps": 2, "horizon": 2, "seed": 1,
                                  "maxnorm": 0.05}},
    }
    for name, body in bodies.items():
        for engine in (0, 1, 2):  # fuzz_request.py's first byte: hfvit, vjepa2-ac, lewm
            (out / f"{name}.{engine}").write_bytes(bytes([engine]) + json.dumps(body).encode())
    # The top bit: the rest builds a body (FuzzedDataProvider) instead of being one.
    rng = random.Random(7)
    for i in range(8):
        (out / f"structured.{i}").write_bytes(bytes([0x80 | i % 3]) + rng.randbytes(64))


def main() -> None:
    corpus = HERE / "corpus"
    for target in ("gguf", "media", "request"):
        (corpus / target).mkdir(parents=True, exist_ok=True)
    gguf_corpus(corpus / "gguf")
    media_corpus(corpus / "media")
    request_corpus(corpus / "request", (corpus / "media" / "tiny.png").read_bytes())
    write_dict(HERE / "gguf.dict")
    for target in ("gguf", "media", "request"):
        files = list((corpus / target).iterdir())
        print(f"{target}: {len(files)} files, {sum(p.stat().st_size for p in files)} bytes")


if __name__ == "__main__":
    main()
