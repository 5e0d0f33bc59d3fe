"""jepa beside the upstream code of the two newest video families, on the same random weights, one clip,
the same threads (issue 22's speed table):

- **V-JEPA 2.1** (family vjepa2_1): Meta's `app/vjepa_2_1` VisionTransformer (facebookresearch/vjepa2 at
  204698b) built as `src/hub/backbones.py` builds `vjepa2_1_vit_base_384`: ViT-B/16 (width 768, 12 blocks,
  12 heads, MLP 3072), 384 px, tubelet 2, interleaved 3-D RoPE interpolated onto the 16-patch grid,
  modality vectors, the final level norm as the output; 16 frames = 8 x 24 x 24 = 4608 tokens.
- **LeVJEPA** (family levjepa, modality video): MLO-lab/LeVJEPA's `module.py` VisionTransformer (481a99b)
  as the released LeVJEPA-VideoMix-Large is configured: ViT-L/16 (1024, 24 blocks, 16 heads, MLP 4096),
  224 px, tubelet 1, a CLS, block-causal attention; 16 frames = 1 + 16 x 14 x 14 = 3137 tokens.

The upstream code is imported from the trees the user passes (`--vjepa2-tree`, `--levjepa-tree`); none of
it is in this repository. V-JEPA 2.1's modules import `drop_path` from timm and nothing else of it (timm is
not installed beside this torch): a stand-in module gives them that one function. Every parameter is
drawn from one seeded generator (the reference bundles' rule: norm gains 1 + 0.1 N(0,1), biases 0.05 N,
modality vectors and CLS 0.5 N, matrices N x clamp(fan_in^-0.5, 0.02, 0.2)), written in the release's
layout (2.1: a `.pt` of {"ema_encoder": `module.backbone.*`}; LeVJEPA: model.safetensors of `encoder.*` +
config.json) and converted by jepa-convert to f32 and bf16 GGUF files, so every engine runs the same
weights. The upstream module is also exported with torch.onnx.export (the TorchScript exporter, then
dynamo; what failed is recorded; bench.peers) and run by ONNX Runtime and OpenVINO, f32.

Variants run interleaved (the order rotates every round) after one untimed warm-up round; the median of
the timed rounds is seconds per clip, with the best round beside it (less sensitive to other load on a
shared machine) and the ratios peer / jepa (above 1: jepa is faster) paired within a round. Every
variant's tokens are compared with the upstream PyTorch module's (min token cosine, max|d| / max|ref|).

    python tools/bench/video_families.py --vjepa2-tree /tmp/vjepa2-204698b --levjepa-tree /tmp/levjepa
    python tools/bench/video_families.py ... --family levjepa --frames 8      # one family, fewer frames
    python tools/bench/video_families.py ... --cpu x86-64-v3     # -> bench-video-families-avx2.json

The JSON goes to tests/results/bench-video-families.json (a rerun of one family keeps the other's
cell). `family_cell(spec, build_peer, ...)` is the cell: it takes the peer as a builder returning a torch
module (called as module(x), x [B, C, T, H, W]) and its state dict, so it is tested without the upstream
trees (tests/test_bench_video_families.py gives it a stand-in module of the same layout)."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/video_families.py: bench from tools/, OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench import harness, peers

UPSTREAM = {
    "vjepa2_1": "facebookresearch/vjepa2 204698b, app/vjepa_2_1/models/vision_transformer.py "
                "VisionTransformer",
    "levjepa": "MLO-lab/LeVJEPA 481a99b, module.py VisionTransformer",
}


@dataclass(frozen=True)
class Spec:
    """One encoder at one size, and the clip it is timed on."""

    family: str  # "vjepa2_1" / "levjepa"
    name: str
    width: int
    depth: int
    heads: int
    img: int
    frames: int
    patch: int = 16

    @property
    def tubelet(self) -> int:
        return 2 if self.family == "vjepa2_1" else 1

    @property
    def n_tokens(self) -> int:
        grid = (self.frames // self.tubelet) * (self.img // self.patch) ** 2
        return grid + (1 if self.family == "levjepa" else 0)


RELEASED = {
    "vjepa2_1": Spec("vjepa2_1", "V-JEPA 2.1 ViT-B/16 (vjepa2_1_vit_base_384)", 768, 12, 12, 384, 16),
    "levjepa": Spec("levjepa", "LeVJEPA ViT-L/16 (LeVJEPA-VideoMix-Large)", 1024, 24, 16, 224, 16),
}
# --smoke: the upstream code at tiny sizes (2.1's levels are defined for 12/24/40/48 blocks only).
SMOKE = {
    "vjepa2_1": Spec("vjepa2_1", "V-JEPA 2.1, tiny (smoke)", 64, 12, 2, 64, 4),
    "levjepa": Spec("levjepa", "LeVJEPA, tiny (smoke)", 64, 2, 2, 64, 4),
}
TREE_FLAG = {"vjepa2_1": "--vjepa2-tree", "levjepa": "--levjepa-tree"}


# --------------------------------------------------------------------------------------------------
# The upstream modules


def _stub_timm() -> None:
    """app/vjepa_2_1/models/utils/modules.py does `from timm.models.layers import drop_path` and uses
    nothing else of timm; drop_path is the identity at inference (eval, drop_prob 0)."""
    if "timm.models.layers" in sys.modules:
        return

    def drop_path(x: Any, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True) -> Any:
        if drop_prob == 0.0 or not training:
            return x
        keep = 1 - drop_prob
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * (mask / keep if scale_by_keep else mask)

    timm, models, layers = (types.ModuleType(n) for n in ("timm", "timm.models", "timm.models.layers"))
    layers.drop_path = drop_path  # type: ignore[attr-defined]
    timm.models, models.layers = models, layers  # type: ignore[attr-defined]
    sys.modules.update({"timm": timm, "timm.models": models, "timm.models.layers": layers})


def upstream_vjepa2_1(tree: Path, spec: Spec) -> Any:
    """The 2.1 encoder as `_make_vjepa2_1_model` builds it (its fixed encoder kwargs; the width, depth and
    heads the `vit_base` factory passes, here from the spec)."""
    import torch

    sys.path.insert(0, str(tree))
    _stub_timm()
    from app.vjepa_2_1.models import vision_transformer as vit

    return vit.VisionTransformer(
        patch_size=spec.patch, img_size=(spec.img, spec.img), num_frames=64, tubelet_size=2, use_sdpa=True,
        use_SiLU=False, wide_SiLU=True, uniform_power=False, use_rope=True, img_temporal_dim_size=1,
        interpolate_rope=True, embed_dim=spec.width, depth=spec.depth, num_heads=spec.heads, mlp_ratio=4,
        qkv_bias=True, norm_layer=partial(torch.nn.LayerNorm, eps=1e-6),
    ).eval()


def upstream_levjepa(tree: Path, spec: Spec) -> Any:
    """LeVJEPA's VisionTransformer with `vit_large`'s fixed arguments and what main.py::build_model
    passes from conf/config.yaml (tubelet 1, RoPE, block-causal; token drop runs only in training)."""
    import torch

    sys.path.insert(0, str(tree))
    import module as levjepa  # MLO-lab/LeVJEPA's module.py

    return levjepa.VisionTransformer(
        img_size=spec.img, patch_size=spec.patch, num_frames=spec.frames, tubelet_size=1,
        embed_dim=spec.width, depth=spec.depth, num_heads=spec.heads, mlp_ratio=4, qkv_bias=True,
        norm_layer=partial(torch.nn.LayerNorm, eps=1e-6), use_rope=True, token_drop_rate=0.95,
        attn_mode="block_causal",
    ).eval()


def randomize(module: Any, seed: int) -> dict[str, np.ndarray]:
    """Every parameter from one generator in named_parameters() order (the reference bundles' rule);
    returns the state dict as float32 arrays."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            z = torch.randn(p.shape, generator=gen)
            leaf = name.rsplit(".", 1)[-1]
            if name.endswith(("mod_embed", "cls_token")):
                v = 0.5 * z
            elif leaf == "bias":
                v = 0.05 * z
            elif p.ndim == 1:  # LayerNorm gains
                v = 1 + 0.1 * z
            else:
                fan_in = math.prod(p.shape[1:])
                v = z * min(max(fan_in**-0.5, 0.02), 0.2)
            p.copy_(v)
    return {k: v.detach().numpy().astype(np.float32) for k, v in module.state_dict().items()}


def write_checkpoint(spec: Spec, state: dict[str, np.ndarray], out: Path) -> Path:
    """The release's layout: what jepa-convert reads."""
    out.mkdir(parents=True, exist_ok=True)
    if spec.family == "vjepa2_1":
        import torch

        path = out / "vjepa2_1.pt"
        encoder = {f"module.backbone.{k}": torch.from_numpy(v) for k, v in state.items()}
        torch.save({"ema_encoder": encoder}, path)
        return path
    from safetensors.numpy import save_file

    tensors = {f"encoder.{k}": np.ascontiguousarray(v) for k, v in state.items()}
    save_file(tensors, str(out / "model.safetensors"))
    cfg = {"model_type": "levjepa", "architectures": ["LeVJEPAModel"], "embed_dim": spec.width,
           "depth": spec.depth, "num_heads": spec.heads, "mlp_ratio": 4, "patch_size": spec.patch,
           "tubelet_size": 1, "in_chans": 3, "img_size": spec.img, "num_frames": spec.frames,
           "attn_mode": "block_causal", "use_rope": True, "qkv_bias": True}
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def convert_kwargs(spec: Spec) -> dict[str, Any]:
    if spec.family == "vjepa2_1":
        return {"family": "vjepa2_1", "n_head": spec.heads, "img_size": spec.img}
    return {"family": "levjepa"}


# --------------------------------------------------------------------------------------------------
# One clip, every engine


def cos_rel(got: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    a, b = got.astype(np.float64), ref.astype(np.float64)
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return {"min_cos": float(cos.min()), "rel": float(np.abs(a - b).max() / np.abs(b).max())}


def family_cell(
    spec: Spec, build_peer: Callable[[], tuple[Any, dict[str, np.ndarray]]], *, threads: int = 2,
    rounds: int = 3, seed: int = 0, onnx: bool = True, ftypes: tuple[str, ...] = ("f32", "bf16"),
    workdir: Path | None = None, pause_s: float = 0.0,
) -> dict[str, Any]:
    """Time one clip of `spec` through the peer (torch; ORT and OpenVINO on its ONNX export when `onnx`)
    and through jepa (one file per ftype, converted from the peer's state dict). build_peer returns the
    torch module (eval, module(x) -> tokens [B, N, D]) and its state dict as arrays."""
    import torch

    import jepa
    from jepa.convert import convert

    torch.set_num_threads(threads)
    module, state = build_peer()
    shape = (1, 3, spec.frames, spec.img, spec.img)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    xt = torch.from_numpy(x)

    def torch_run() -> np.ndarray:
        with torch.inference_mode():
            return np.asarray(module(xt).numpy())

    with tempfile.TemporaryDirectory(dir=workdir) as tmp_s:
        tmp = Path(tmp_s)
        src = write_checkpoint(spec, state, tmp / "ckpt")
        files = {ft: convert(src, tmp / f"{ft}.gguf", ftype=ft, **convert_kwargs(spec)) for ft in ftypes}
        del state
        runs: dict[str, Callable[[], np.ndarray]] = {"torch-f32": torch_run}
        notes: dict[str, Any] = {}
        if onnx:
            import openvino as ov

            # At the clip's fixed shape: each exporter in turn until a runtime takes its file.
            loaders: dict[str, Callable[[Path], Any]] = {
                "ort-f32": lambda p: peers.ort_session(p, threads),
                "ov-f32": lambda p: peers.ov_compile(ov.Core(), p, x.shape, "f32", threads),
            }
            notes["onnx_export"], loaded = peers.export_onnx(module, (xt,), tmp / "model.onnx",
                                                             loaders=loaders)
            if "ort-f32" in loaded:
                sess = loaded["ort-f32"]
                runs["ort-f32"] = lambda: np.asarray(sess.run(None, {"x": x})[0])
            if "ov-f32" in loaded:
                compiled = loaded["ov-f32"]
                runs["ov-f32"] = lambda: np.asarray(compiled({"x": x})[0])
        contexts = {ft: jepa.Model(p).context(threads=threads) for ft, p in files.items()}
        for ft, c in contexts.items():
            runs[f"jepa-{ft}"] = partial(c.encode, x)
        load_average = [os.getloadavg()]

        def log(r: int, n: str, dt: float) -> None:
            harness.log(f"  {spec.family} round {r} {n:10s} {dt:7.2f} s")
            load_average.append(os.getloadavg())

        # pause_s: the last runtime's worker threads go idle before the next starts.
        with harness.Load() as load:
            got = harness.interleave(runs, rounds, warmup=1, pause_s=pause_s, log=log)
    times, outputs = got.samples, got.outputs
    med, best = got.medians(), got.best()
    names = list(runs)
    others = [n for n in names if not n.startswith("jepa")]
    exact: list[str] = [p for p in ("ort-f32", "ov-f32") if p in names]
    ratios: dict[str, float] = {}
    for j in (n for n in names if n.startswith("jepa")):
        for p in others:
            ratios[f"{p} / {j}"] = got.paired([p], j) or 0.0
        if exact:
            ratios[f"faster of ORT/OV / {j}"] = got.paired(exact, j) or 0.0
    ref = outputs["torch-f32"]
    return {
        "family": spec.family,
        "model": spec.name,
        "spec": asdict(spec) | {"tubelet": spec.tubelet, "n_tokens": spec.n_tokens},
        "tokens_shape": list(ref.shape),
        "threads": threads,
        "rounds": rounds,
        "pause_s": pause_s,
        "goal": ("jepa f32 >= 1.0x the faster of ORT / OpenVINO f32" if exact
                 else "jepa >= 1.5x the upstream PyTorch code (no ONNX export)"),
        "seconds_per_clip": med,
        "best_seconds_per_clip": best,
        "ratios": ratios,
        "ratios_of_best": {k: min(best[p] for p in (exact if k.startswith("faster") else [k.split(" / ")[0]]))
                           / best[k.split(" / ")[1]] for k in ratios},
        "parity_vs_torch": {n: cos_rel(o, ref) for n, o in outputs.items() if n != "torch-f32"},
        "all_times": times,
        "load_average": load_average,  # before the first call and after each
        "others_cpu_share": load.others(),
        **notes,
    }


# --------------------------------------------------------------------------------------------------


def options() -> Any:
    ap = harness.parser(__doc__, smoke="tiny sizes, 1 round (the wiring, not speed)")
    ap.add_argument("--vjepa2-tree", type=Path, help="facebookresearch/vjepa2 at 204698b (V-JEPA 2.1)")
    ap.add_argument("--levjepa-tree", type=Path, help="a folder with MLO-lab/LeVJEPA's module.py (481a99b)")
    ap.add_argument("--family", choices=sorted(RELEASED), action="append", help="default: both")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--frames", type=int, default=None, help="override the clip length (default 16)")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds idle before each timed call")
    ap.add_argument("--no-onnx", action="store_true", help="skip the ONNX Runtime / OpenVINO peers")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = options()
    args = harness.parse(ap, argv)
    rounds = min(args.rounds, 1) if args.smoke else args.rounds
    out = harness.out_path(args, "bench-video-families")
    families = args.family or sorted(RELEASED)
    trees = {"vjepa2_1": args.vjepa2_tree, "levjepa": args.levjepa_tree}
    for fam in families:
        if trees[fam] is None:
            ap.error(f"{TREE_FLAG[fam]} is needed for {fam}")
    builders = {"vjepa2_1": upstream_vjepa2_1, "levjepa": upstream_levjepa}
    run = harness.Run("bench-video-families", args.threads, args.smoke,
                      modules=("torch", "onnx", "onnxruntime", "openvino"))
    cells: list[dict[str, Any]] = []
    if out.is_file():  # keep the other family's cell when one is rerun
        old = json.loads(out.read_text())
        cells = [c for c in old.get("cells", []) if c["family"] not in families]
    for fam in families:
        tree = trees[fam]
        spec = SMOKE[fam] if args.smoke else RELEASED[fam]
        if args.frames is not None:
            spec = replace(spec, frames=args.frames)

        def build(fam: str = fam, tree: Path = tree, spec: Spec = spec) -> tuple[Any, dict[str, np.ndarray]]:
            module = builders[fam](tree, spec)
            return module, randomize(module, seed=2201)

        harness.log(f"{spec.name}: {spec.frames} frames at {spec.img} px = {spec.n_tokens} tokens")
        cell = family_cell(spec, build, threads=args.threads, rounds=rounds, onnx=not args.no_onnx,
                           pause_s=args.pause)
        cell["measured_at"] = time.strftime(harness.ISO)
        cells.append(cell)
        for n, t in cell["seconds_per_clip"].items():
            print(f"{fam:9s} {n:10s} {t:8.2f} s/clip (best {cell['best_seconds_per_clip'][n]:.2f})"
                  + (f"  parity {cell['parity_vs_torch'][n]}" if n in cell["parity_vs_torch"] else ""))
        for k, v in cell["ratios"].items():
            print(f"{fam:9s} {k:32s} {v:.2f}x")
    cells.sort(key=lambda c: c["family"] != "vjepa2_1")
    harness.write_record(out, {**run.head(), "upstream": UPSTREAM, "cells": cells})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
