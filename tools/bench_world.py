#!/usr/bin/env python3
"""The world models' planning cells, jepa against the upstream PyTorch code -> tests/results/bench-world.json.

One run times, side by side on the same weights, inputs and thread count (jepa's contexts and
torch.set_num_threads both get --threads), three variants per cell, interleaved (the order rotates
every round): jepa with f32, f16 and bf16 weights (the exact class and the two half-class files), and
upstream's PyTorch code in f32.

- V-JEPA 2-AC at the released dimensions: predictor 24 blocks x 1024, 16 heads, MLP 4096, reading
  ViT-g latents (width 1408), 16 x 16 = 256 patch tokens per frame, action / state 7. The rollouts
  start from latents, so the encoder is not part of a cell (the checkpoint holds a 1-layer
  ViT-g-wide encoder only to be a valid file). Cells: one rollout step at the horizon's longest prefix
  (`Context.world_predict` on K candidates x 2 frames = K x 516 tokens) and one CEM iteration (a 1-iteration
  plan: a full rollout of K samples) at horizons H = 2 and 4, at K = 16 and 64.
  Upstream: Meta's `VisionTransformerPredictorAC` as the cc-vjepa2 package ships it
  (`vjepa2.models.ac_predictor.vit_ac_predictor`, the factory the released model goes through), with
  random weights; its state dict, in the released checkpoint's layout, goes through
  `jepa-convert --family vjepa2_ac` into the f32 / f16 GGUFs jepa runs, so both sides run the same
  weights by construction. Meta's CEM and pose update live in the vjepa2 repository's notebooks, not in
  the package: the CEM cells run jepa.planning's transcription of them (`ac_cem`) around either
  predictor, so they compare the predictors under one planner.
- LeWM at the published dimensions: ViT-tiny encoder (not part of a cell), projectors 192 -> 2048 ->
  192, predictor 6 adaLN-zero blocks, 16 heads x 64, MLP 2048, a 3-frame window, actions 5 x 2. Cells:
  one predict step at K = 300 (the eval's num_samples; [300, 3, 192]) and a full plan with the eval's
  solver config (300 samples, top 30, 30 steps, horizon 5) from a 1-frame history.
  Upstream: stable-worldmodel's LeWM (`stable_worldmodel.wm.lewm`: `LeWM`, `Predictor`, `Embedder`,
  `MLP`) planned by its `CEMSolver` (the solver LeWM's eval config instantiates): upstream code, not a
  transcription. Its state dict plus a random HF-ViT encoder, saved as the published `weights.pt` +
  Hydra `config.json`, goes through `jepa-convert --family lewm`. Both sides plan from given
  embeddings: upstream gets them through the info-dict keys its LeWM caches (`emb`, `goal_emb`), so
  neither side encodes; jepa replays the solver's torch.Generator draws (`noise=`), so both plan on the
  same candidates and their plans compare.

Before any timing the sides are compared (jepa's outputs against upstream's: max |d| / max |upstream|,
recorded per cell): the AC predictor on K = 2 candidates (this call is also every variant's warm-up),
the LeWM cells on their warm-up round; a jepa f32 predictor more than 1e-3 off stops the run. The
timed outputs are compared too. Ratios are upstream / jepa (above 1, jepa is faster): the median over
rounds of the ratio within a round, and the ratio of the medians; the goal for jepa f32 is 1.5, and 2
for the AC CEM iteration at H = 4 (issue 26: upstream recomputes 10 frame blocks there, the cache 4).

Rounds: LeWM cells 1 untimed warm-up round + --rounds timed; AC cells no warm-up round (the agreement
call warmed every variant) + --ac-rounds timed (default 2 at K = 16 and 1 at K = 64: a K = 64 round
of the three variants takes about half an hour on 2 cores, the H = 4 CEM iteration at K = 64 about 15
minutes more). Each cell records its rounds.

    python tools/bench_world.py --threads 2                 # everything as released (~80 min, 2 cores)
    python tools/bench_world.py --quick                     # CPU-sized: see QUICK below
    python tools/bench_world.py --smoke --out /tmp/w.json   # tiny dims, 1 round, every variant (the test)
    python tools/bench_world.py --no-upstream               # jepa only (no torch / peers needed)

`--quick` keeps every width and token count but runs the AC predictor with --ac-layers blocks (default
2 of 24; its cost is close to linear in the depth) and the LeWM plan with fewer steps; the JSON and the
docs say so. The peers are requirements/bench.txt's (torch, cc-vjepa2, stable-worldmodel)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import AVX2_ENV, git_commit, machine_busy_s, machine_info, self_busy_s, write_record

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "results" / "bench-world.json"
AVX2_OUT = ROOT / "tests" / "results" / "bench-world-avx2.json"
SMOKE_OUT = Path(tempfile.gettempdir()) / "bench-world-smoke.json"
FTYPES = ("f32", "f16", "bf16")
UP = "upstream"
GOAL = 1.5  # upstream / jepa f32, per cell
HALF_GOAL = 3.0  # upstream f32 / jepa bf16, on a CPU with bf16 hardware (issue 26)
BF16_HARDWARE = ("avx512_bf16", "amx_bf16")
CHECK_MAX_REL = 1e-3  # jepa f32 against upstream beyond this: the sides do not run the same model

# Released dimensions (V-JEPA 2-AC on ViT-g; LeWM per config/train/model/lewm.yaml with vit_hf 'tiny').
AC_FULL = dict(embed_dim=1024, n_layer=24, n_head=16, ffn_dim=4096, enc_dim=1408, enc_layers=1, enc_heads=22,
               enc_ffn_dim=6144, img_size=256, patch_size=16, tubelet_size=2, n_frames=64)
LEWM_FULL = dict(enc_dim=192, enc_layers=12, enc_heads=3, patch_size=14, img_size=224, embed_dim=192,
                 n_layer=6, n_head=16, head_dim=64, ffn_dim=2048, n_frames=3, action_dim=10, proj_hidden=2048)
# vit_ac_predictor fixes mlp_ratio 4, so the smoke predictor keeps ffn_dim = 4 x embed_dim.
AC_SMOKE = dict(embed_dim=64, n_layer=1, n_head=2, ffn_dim=256, enc_dim=64, enc_layers=1, enc_heads=2,
                enc_ffn_dim=256, img_size=32, patch_size=16, tubelet_size=2, n_frames=64)
LEWM_SMOKE = dict(enc_dim=32, enc_layers=1, enc_heads=2, patch_size=14, img_size=28, embed_dim=32, n_layer=1,
                  n_head=2, head_dim=16, ffn_dim=64, n_frames=3, action_dim=10, proj_hidden=64)
LEWM_ACTION_BLOCK = 5  # PushT's frameskip: an action block is 5 env actions of 2
AC_K = (16, 64)
AC_H = 2
AC_CEM_GOALS = {2: GOAL, 4: 2.0}  # CEM iteration horizon -> its goal (issue 26)
AC_CHECK_K = 2
LEWM_K = 300
LEWM_PLAN = dict(num_samples=300, topk=30, n_steps=30, horizon=5)  # config/eval/solver/cem.yaml, PushT
QUICK_AC_LAYERS = 2
QUICK_LEWM_PLAN = dict(num_samples=300, topk=30, n_steps=3, horizon=5)
SMOKE_LEWM_PLAN = dict(num_samples=16, topk=4, n_steps=2, horizon=5)
FULL_AC_ROUNDS = (2, 1)  # timed rounds at K = 16 and 64 for the released depth
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
             "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


def versions(up: Upstream | None) -> dict[str, str]:
    import jepa

    out = {"jepa": jepa.__version__, "ggml": jepa._engine.ggml_version(), "numpy": np.__version__,
           "python": platform.python_version()}
    if up is not None:
        out.update(up.versions)
    return out


def cpu_flags() -> set[str]:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def bf16_hardware() -> bool:
    """Whether jepa's bf16 files run on bf16 instructions here: the CPU has them and JEPA_GEMM (avx2,
    portable, ggml) does not hold the engine below them. The half-class goal is set for such a CPU."""
    held = os.environ.get("JEPA_GEMM", "") not in ("", "auto", "native")
    return not held and any(f in cpu_flags() for f in BF16_HARDWARE)


def cpu_info(threads: int, up: Upstream | None) -> dict[str, Any]:
    info = machine_info(threads)
    flags = cpu_flags()
    info["cpu_flags"] = [f for f in CPU_FLAGS if f in flags]
    info["bf16_hardware"] = bf16_hardware()
    import jepa

    info["kernels"] = jepa.cpu_kernels()  # the kernel each file type ran on (JEPA_GEMM shows here)
    if up is not None:
        torch = up.torch
        info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        info["torch_threads"] = torch.get_num_threads()
        info["torch_mkldnn"] = bool(torch.backends.mkldnn.is_available())
    return info


# ---- the upstream code -----------------------------------------------------------------------------


@dataclass
class Upstream:
    torch: Any
    ac_predictor: Any  # vjepa2.models.ac_predictor
    lewm: Any  # stable_worldmodel.wm.lewm.lewm
    module: Any  # stable_worldmodel.wm.lewm.module
    cem: Any  # stable_worldmodel.solver.cem
    shims: list[str]
    versions: dict[str, str]


@contextlib.contextmanager
def _modules_as(mods: dict[str, types.ModuleType]) -> Iterator[None]:
    """Put `mods` in sys.modules for the duration, then restore what was there."""
    saved = {k: sys.modules.get(k) for k in mods}
    sys.modules.update(mods)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def _bare_package(name: str) -> None:
    """Register package `name` without running its __init__ (its submodules import as usual)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise ModuleNotFoundError(f"no package {name!r}: pip install -r requirements/bench.txt")
    mod = types.ModuleType(name)
    mod.__path__ = list(spec.submodule_search_locations)
    mod.__spec__ = spec
    sys.modules[name] = mod


def load_upstream(threads: int) -> Upstream:
    """torch with `threads` threads and the peers' model code, imported unmodified from the installed
    packages. Two import shims, neither touching code that runs: PyPI's torchvision wheels are CUDA
    builds that cannot load beside the CPU torch (and it may be absent), so
    - timm, which vjepa2's modules.py imports only for `drop_path` (called by DropPath, built only when
      drop_path_rate > 0; the released predictor has 0), is replaced by a stub during that import;
    - stable_worldmodel's and stable_worldmodel.wm's package __init__s (environments, datasets,
      torchvision) are skipped: solver/ and wm/lewm/ are imported directly."""
    from importlib.metadata import version

    import torch

    torch.set_num_threads(threads)
    shims = []
    if "timm.models.layers" in sys.modules:
        from vjepa2.models import ac_predictor
    else:
        def drop_path(*_: Any, **__: Any) -> Any:
            raise NotImplementedError("timm stub: drop_path is never called at drop_path_rate 0")

        stubs = {n: types.ModuleType(n) for n in ("timm", "timm.models", "timm.models.layers")}
        for m in stubs.values():
            m.__path__ = []
        stubs["timm.models.layers"].drop_path = drop_path  # type: ignore[attr-defined]
        with _modules_as(stubs):
            from vjepa2.models import ac_predictor
        shims.append("timm stubbed while importing vjepa2.models (only its drop_path is named, and never "
                     "called at drop_path_rate 0): timm needs torchvision, whose PyPI wheels are CUDA builds")
    bare = [pkg for pkg in ("stable_worldmodel", "stable_worldmodel.wm") if pkg not in sys.modules]
    for pkg in bare:
        _bare_package(pkg)
    if bare:
        shims.append(f"the package __init__s of {' and '.join(bare)} not run (they import the environments, "
                     "datasets and torchvision); solver/ and wm/lewm/ imported as they are")
    cem = importlib.import_module("stable_worldmodel.solver.cem")
    lewm = importlib.import_module("stable_worldmodel.wm.lewm.lewm")
    module = importlib.import_module("stable_worldmodel.wm.lewm.module")
    # vjepa2's attention enters torch.backends.cuda.sdp_kernel() (a no-op on the CPU) on every call.
    warnings.filterwarnings("ignore", message=r".*sdp_kernel\(\)` is deprecated", category=FutureWarning)
    vers = {"torch": torch.__version__, "cc-vjepa2": version("cc-vjepa2"),
            "stable-worldmodel": version("stable-worldmodel")}
    return Upstream(torch, ac_predictor, lewm, module, cem, shims, vers)


def _randn(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32)


def randomize(model: Any, rng: np.random.Generator) -> None:
    """jepa.testing.random_weights' rule on a torch module: norm gains 1 + 0.2 N, Linear / Conv1d
    weights N / sqrt(fan_in), biases and other parameters 0.2 N; BatchNorm running mean 0.2 N,
    running var exp(0.3 N). Every adaLN-zero Linear is random too (zero gates would hide the blocks)."""
    torch = importlib.import_module("torch")
    nn = torch.nn

    def put(t: Any, v: np.ndarray) -> None:
        t.copy_(torch.from_numpy(v))

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm | nn.BatchNorm1d):
                if m.weight is not None:
                    put(m.weight, 1.0 + 0.2 * _randn(rng, tuple(m.weight.shape)))
                    put(m.bias, 0.2 * _randn(rng, tuple(m.bias.shape)))
                if isinstance(m, nn.BatchNorm1d):
                    put(m.running_mean, 0.2 * _randn(rng, tuple(m.running_mean.shape)))
                    put(m.running_var, np.exp(0.3 * _randn(rng, tuple(m.running_var.shape))))
            elif isinstance(m, nn.Linear | nn.Conv1d):
                w = m.weight
                put(w, _randn(rng, tuple(w.shape)) * np.float32(1.0 / np.sqrt(w[0].numel())))
                if m.bias is not None:
                    put(m.bias, 0.2 * _randn(rng, tuple(m.bias.shape)))
            else:
                for p in m.parameters(recurse=False):
                    put(p, 0.2 * _randn(rng, tuple(p.shape)))


def _linear_np(rng: np.random.Generator, out: dict[str, np.ndarray], name: str, rows: int, cols: int) -> None:
    out[f"{name}.weight"] = _randn(rng, (rows, cols)) * np.float32(1.0 / np.sqrt(cols))
    out[f"{name}.bias"] = 0.2 * _randn(rng, (rows,))


def _norm_np(rng: np.random.Generator, out: dict[str, np.ndarray], name: str, d: int) -> None:
    out[f"{name}.weight"] = 1.0 + 0.2 * _randn(rng, (d,))
    out[f"{name}.bias"] = 0.2 * _randn(rng, (d,))


def meta_encoder_state(cfg: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A random V-JEPA 2 encoder state dict in Meta's names (not run here; the file needs one)."""
    e, f, t, p = cfg["enc_dim"], cfg["enc_ffn_dim"], cfg["tubelet_size"], cfg["patch_size"]
    out = {"patch_embed.proj.weight": _randn(rng, (e, 3, t, p, p)) * np.float32(1 / np.sqrt(3 * t * p * p)),
           "patch_embed.proj.bias": 0.2 * _randn(rng, (e,))}
    for i in range(cfg["enc_layers"]):
        b = f"blocks.{i}."
        _norm_np(rng, out, b + "norm1", e)
        _linear_np(rng, out, b + "attn.qkv", 3 * e, e)
        _linear_np(rng, out, b + "attn.proj", e, e)
        _norm_np(rng, out, b + "norm2", e)
        _linear_np(rng, out, b + "mlp.fc1", f, e)
        _linear_np(rng, out, b + "mlp.fc2", e, f)
    _norm_np(rng, out, "norm", e)
    return out


def hf_vit_state(cfg: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A random HF ViTModel state dict under the transformers-4.x names the published LeWM weights.pt
    carries (not run here; the file needs one)."""
    e, p, s = cfg["enc_dim"], cfg["patch_size"], cfg["img_size"]
    n = (s // p) ** 2
    patch = _randn(rng, (e, 3, p, p)) * np.float32(1 / np.sqrt(3 * p * p))
    out = {"embeddings.cls_token": 0.2 * _randn(rng, (1, 1, e)),
           "embeddings.position_embeddings": 0.2 * _randn(rng, (1, n + 1, e)),
           "embeddings.patch_embeddings.projection.weight": patch,
           "embeddings.patch_embeddings.projection.bias": 0.2 * _randn(rng, (e,))}
    for i in range(cfg["enc_layers"]):
        b = f"encoder.layer.{i}."
        _norm_np(rng, out, b + "layernorm_before", e)
        for q in ("query", "key", "value"):
            _linear_np(rng, out, b + f"attention.attention.{q}", e, e)
        _linear_np(rng, out, b + "attention.output.dense", e, e)
        _norm_np(rng, out, b + "layernorm_after", e)
        _linear_np(rng, out, b + "intermediate.dense", 4 * e, e)
        _linear_np(rng, out, b + "output.dense", e, 4 * e)
    _norm_np(rng, out, "layernorm", e)
    return out


def ac_upstream(up: Upstream, cfg: dict[str, int], tmp: Path, seed: int,
                ftypes: tuple[str, ...]) -> tuple[dict[str, str], Any]:
    """Meta's predictor with random weights, and jepa-convert's GGUFs of its checkpoint, one per file type."""
    from jepa.convert import convert

    torch = up.torch
    if cfg["ffn_dim"] != 4 * cfg["embed_dim"]:
        raise ValueError("vit_ac_predictor fixes mlp_ratio 4: ffn_dim must be 4 x embed_dim")
    s = cfg["img_size"]
    pred = up.ac_predictor.vit_ac_predictor(
        img_size=(s, s), patch_size=cfg["patch_size"], num_frames=cfg["n_frames"],
        tubelet_size=cfg["tubelet_size"], embed_dim=cfg["enc_dim"], predictor_embed_dim=cfg["embed_dim"],
        depth=cfg["n_layer"], num_heads=cfg["n_head"], action_embed_dim=7, use_extrinsics=False,
        is_frame_causal=True, use_rope=True,
    )
    rng = np.random.default_rng(seed)
    randomize(pred, rng)
    pred.eval().requires_grad_(False)
    enc = meta_encoder_state(cfg, rng)
    ckpt = {"encoder": {f"module.backbone.{k}": torch.from_numpy(v) for k, v in enc.items()},
            "predictor": {f"module.backbone.{k}": v for k, v in pred.state_dict().items()}}
    src = tmp / "vjepa2-ac.pt"
    torch.save(ckpt, src)
    del ckpt
    files = {ft: convert(src, tmp / f"ac-{ft}.gguf", family="vjepa2_ac", ftype=ft, img_size=s,
                         head_dim=cfg["embed_dim"] // cfg["n_head"]) for ft in ftypes}
    src.unlink()
    return files, pred


def lewm_config(cfg: dict[str, int]) -> dict[str, Any]:
    """The Hydra model config.json of the published LeWM files, at these sizes."""
    d, h = cfg["embed_dim"], cfg["proj_hidden"]
    bn = {"_target_": "torch.nn.BatchNorm1d", "_partial_": True}
    return {
        "_target_": "stable_worldmodel.wm.lewm.LeWM",
        "encoder": {"_target_": "stable_pretraining.backbone.utils.vit_hf", "size": "tiny",
                    "patch_size": cfg["patch_size"], "image_size": cfg["img_size"], "pretrained": False,
                    "use_mask_token": False, "hidden_size": cfg["enc_dim"],
                    "num_hidden_layers": cfg["enc_layers"], "num_attention_heads": cfg["enc_heads"],
                    "intermediate_size": 4 * cfg["enc_dim"]},
        "predictor": {"_target_": "stable_worldmodel.wm.lewm.module.Predictor", "num_frames": cfg["n_frames"],
                      "input_dim": d, "hidden_dim": d, "output_dim": d, "depth": cfg["n_layer"],
                      "heads": cfg["n_head"], "mlp_dim": cfg["ffn_dim"], "dim_head": cfg["head_dim"],
                      "dropout": 0.1, "emb_dropout": 0.0},
        "action_encoder": {"_target_": "stable_worldmodel.wm.lewm.module.Embedder",
                           "input_dim": cfg["action_dim"], "emb_dim": d},
        "projector": {"_target_": "stable_worldmodel.wm.lewm.module.MLP", "input_dim": cfg["enc_dim"],
                      "output_dim": d, "hidden_dim": h, "norm_fn": bn},
        "pred_proj": {"_target_": "stable_worldmodel.wm.lewm.module.MLP", "input_dim": d, "output_dim": d,
                      "hidden_dim": h, "norm_fn": bn},
    }


def build_lewm(up: Upstream, config: dict[str, Any]) -> Any:
    """stable_worldmodel's LeWM from config.json's sections (what Hydra would instantiate), without
    the encoder (no cell runs it: the plan starts from embeddings)."""
    nn, m = up.torch.nn, up.module

    def kw(sec: str) -> dict[str, Any]:
        return {k: v for k, v in config[sec].items() if not k.startswith("_") and k != "norm_fn"}

    return up.lewm.LeWM(encoder=nn.Identity(), predictor=m.Predictor(**kw("predictor")),
                        action_encoder=m.Embedder(**kw("action_encoder")),
                        projector=m.MLP(**kw("projector"), norm_fn=nn.BatchNorm1d),
                        pred_proj=m.MLP(**kw("pred_proj"), norm_fn=nn.BatchNorm1d))


def lewm_upstream(up: Upstream, cfg: dict[str, int], tmp: Path, seed: int,
                  ftypes: tuple[str, ...]) -> tuple[dict[str, str], Any]:
    """stable_worldmodel's LeWM with random weights, and jepa-convert's GGUFs of its published-layout
    files (weights.pt + config.json), one per file type."""
    from jepa.convert import convert

    torch = up.torch
    config = lewm_config(cfg)
    model = build_lewm(up, config)
    rng = np.random.default_rng(seed)
    randomize(model, rng)
    model.eval().requires_grad_(False)
    state = {f"encoder.{k}": torch.from_numpy(v) for k, v in hf_vit_state(cfg, rng).items()}
    state.update(model.state_dict())
    src = tmp / "lewm"
    src.mkdir()
    torch.save(state, src / "weights.pt")
    (src / "config.json").write_text(json.dumps(config, indent=2))
    files = {ft: convert(src, tmp / f"lewm-{ft}.gguf", family="lewm", ftype=ft) for ft in ftypes}
    (src / "weights.pt").unlink()
    return files, model


def solver_draws(torch: Any, seed: int, n_steps: int, num_samples: int, horizon: int, a: int) -> np.ndarray:
    """The standard-normal draws CEMSolver.solve makes from its torch.Generator(seed), in order,
    in jepa's replay layout [n_steps, num_samples, horizon, A]."""
    g = torch.Generator().manual_seed(seed)
    return np.stack([torch.randn(1, num_samples, horizon, a, generator=g, dtype=torch.float32)[0].numpy()
                     for _ in range(n_steps)])


# ---- timing ----------------------------------------------------------------------------------------


def rel_err(x: Any, ref: Any) -> float:
    """max |x - ref| / max |ref|, 3 significant digits."""
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    scale = float(np.abs(ref).max()) or 1.0
    return float(f"{float(np.abs(x - ref).max()) / scale:.3g}")


def time_cell(runs: dict[str, Callable[[], Any]], rounds: int, warmup: int = 1,
              check: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
              goal: float = GOAL) -> dict[str, Any]:
    """Run the variants interleaved (order rotating each round); the first `warmup` rounds are dropped.
    `check` gets each variant's first output: right after the warm-up rounds (before any timing) when
    there are some, after the timed rounds otherwise; it may raise to stop the run."""
    names = list(runs)
    samples: dict[str, list[float]] = {n: [] for n in names}
    outputs: dict[str, Any] = {}
    agreement: dict[str, Any] | None = None
    load_before = os.getloadavg()[0]
    busy0, self0 = machine_busy_s(), self_busy_s()
    t0 = time.perf_counter()
    for r in range(warmup + rounds):
        if check is not None and warmup and r == warmup:
            agreement = check(outputs)
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            s = time.perf_counter()
            out = runs[n]()
            dt = time.perf_counter() - s
            outputs.setdefault(n, out)
            if r >= warmup:
                samples[n].append(1000 * dt)
    elapsed = time.perf_counter() - t0
    if check is not None and not warmup:
        agreement = check(outputs)
    others = (machine_busy_s() - busy0 - (self_busy_s() - self0)) / (elapsed * (os.cpu_count() or 1))
    ms = {n: statistics.median(v) for n, v in samples.items()}
    cell: dict[str, Any] = {
        "ms": {n: round(v, 2) for n, v in ms.items()},
        "rounds": rounds,
        "warmup_rounds": warmup,
    }
    if UP in runs:
        jepa_names = [n for n in names if n != UP]
        cell["ratio_upstream_over"] = {
            n: round(statistics.median(u / j for u, j in zip(samples[UP], samples[n], strict=True)), 3)
            for n in jepa_names}
        cell["ratio_of_medians"] = {n: round(ms[UP] / ms[n], 3) for n in jepa_names}
        cell["goal"] = goal
        cell["meets_goal"] = cell["ratio_upstream_over"]["f32"] >= goal
        if "bf16" in jepa_names and bf16_hardware():
            cell["half_goal"] = HALF_GOAL
            cell["meets_half_goal"] = cell["ratio_upstream_over"]["bf16"] >= HALF_GOAL
    if agreement is not None:
        cell["agreement"] = agreement
    cell.update({
        "samples_ms": {n: [round(x, 2) for x in v] for n, v in samples.items()},
        "others_cpu_share": round(max(others, 0.0), 3),
        "load_avg_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "seconds": round(elapsed, 1),
    })
    return cell


def _vs_upstream(outputs: dict[str, Any], key: Callable[[Any], Any] = lambda x: x) -> dict[str, float]:
    return {n: rel_err(key(o), key(outputs[UP])) for n, o in outputs.items() if n != UP}


def _guard(what: str, errs: dict[str, float]) -> dict[str, float]:
    if errs.get("f32", 0.0) > CHECK_MAX_REL:
        raise SystemExit(f"{what}: jepa f32 is {errs['f32']:.3g} (max |d| / max |upstream|) off upstream, "
                         f"beyond {CHECK_MAX_REL}: the two sides do not run the same model")
    return errs


def _report(name: str, cell: dict[str, Any]) -> None:
    ratio = cell.get("ratio_upstream_over")
    extra = f"  upstream/jepa {ratio}" if ratio else ""
    print(f"[{name}] ms {cell['ms']}{extra}  ({cell['seconds']:.0f} s)", file=sys.stderr, flush=True)


def ac_cells(paths: dict[str, str], threads: int, ac_rounds: tuple[int, int], seed: int,
             upstream: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import jepa
    from jepa import planning, world

    ctxs = {ft: jepa.Model(p).context(threads=threads) for ft, p in paths.items()}
    info = next(iter(ctxs.values())).model.info
    hw, d = int(info.pred_grid_size) ** 2, int(info.embed_dim)
    predict: dict[str, Callable[..., np.ndarray]] = {ft: world.predictor(c) for ft, c in ctxs.items()}
    if upstream is not None:
        torch = importlib.import_module("torch")

        def torch_predict(lat: np.ndarray, acts: np.ndarray, states: np.ndarray) -> np.ndarray:
            t = [torch.from_numpy(np.ascontiguousarray(x, np.float32)) for x in (lat, acts, states)]
            with torch.inference_mode():
                return upstream(*t).numpy()

        predict[UP] = torch_predict
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((hw, d)).astype(np.float32)
    goal = rng.standard_normal((hw, d)).astype(np.float32)
    state = (0.1 * rng.standard_normal(7)).astype(np.float32)

    def inputs(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (rng.standard_normal((k, AC_H * hw, d)).astype(np.float32),
                (0.05 * rng.standard_normal((k, AC_H, 7))).astype(np.float32),
                (0.1 * rng.standard_normal((k, AC_H, 7))).astype(np.float32))

    # The agreement check before any timing, on K = 2; it is every variant's warm-up call too.
    t0 = time.perf_counter()
    check_in = inputs(AC_CHECK_K)
    outs = {n: f(*check_in) for n, f in predict.items()}
    pre: dict[str, Any] = {"K": AC_CHECK_K, "H": AC_H, "seconds": round(time.perf_counter() - t0, 1)}
    if upstream is not None:
        pre["max_rel_err"] = _guard("AC predictor check", _vs_upstream(outs))
        print(f"[ac check K={AC_CHECK_K}] max rel err vs upstream {pre['max_rel_err']}  "
              f"({pre['seconds']:.0f} s)", file=sys.stderr, flush=True)
    cells = []
    for k, rounds in zip(AC_K, ac_rounds, strict=True):
        lat, acts, states = inputs(k)
        step = {n: partial(f, lat, acts, states) for n, f in predict.items()}
        check = None if upstream is None else (lambda o: {"predicted_latents_max_rel_err": _vs_upstream(o)})
        cell = {"cell": "ac_step", "K": k, "H": AC_H, "tokens": k * AC_H * (2 + hw),
                **time_cell(step, rounds, warmup=0, check=check)}
        cells.append(cell)
        _report(f"ac_step K={k}", cell)
        for h, cem_goal in AC_CEM_GOALS.items():
            opts = dict(samples=k, topk=min(10, k // 2), cem_steps=1, horizon=h, seed=seed)
            plan: dict[str, Callable[[], Any]] = {
                ft: partial(world.plan_latents, c, z, goal, state, **opts) for ft, c in ctxs.items()}
            if upstream is not None:
                energy = planning.ac_energy_fn(predict[UP], z, state, goal)
                plan[UP] = partial(planning.ac_cem, energy, **opts)
                check = lambda o: {  # noqa: E731
                    "plan_actions_max_rel_err": _vs_upstream(o, lambda p: p["actions"]),
                    "energy_max_rel_err": _vs_upstream(o, lambda p: p["energy_per_iteration"]),
                }
            cell = {"cell": "ac_cem_iter", "K": k, "H": h,
                    **time_cell(plan, rounds, warmup=0, check=check, goal=cem_goal)}
            cells.append(cell)
            _report(f"ac_cem_iter K={k} H={h}", cell)
    return cells, pre


def lewm_cells(paths: dict[str, str], threads: int, rounds: int, seed: int, k: int,
               plan_cfg: dict[str, int], upstream: Upstream | None = None,
               model: Any = None) -> list[dict[str, Any]]:
    import jepa
    from jepa import world

    ctxs = {ft: jepa.Model(p).context(threads=threads) for ft, p in paths.items()}
    info = next(iter(ctxs.values())).model.info
    d, a, window = int(info.wm_embed_dim), int(info.pred_action_dim), int(info.pred_n_frames)
    rng = np.random.default_rng(seed)
    embs = rng.standard_normal((k, window, d)).astype(np.float32)
    acts = rng.standard_normal((k, window, a)).astype(np.float32)
    history = rng.standard_normal((1, d)).astype(np.float32)
    goal = rng.standard_normal(d).astype(np.float32)
    step: dict[str, Callable[[], Any]] = {ft: partial(c.world_predict, embs, acts) for ft, c in ctxs.items()}
    plan_opts: dict[str, Any] = dict(plan_cfg, seed=seed)
    check = check_plan = None
    if upstream is not None:
        torch = upstream.torch
        te, ta = torch.from_numpy(embs), torch.from_numpy(acts)

        def torch_step() -> np.ndarray:
            with torch.inference_mode():
                return model.predict(te, model.action_encoder(ta)).numpy()

        step[UP] = torch_step
        check = lambda o: {"predicted_emb_max_rel_err": _guard("LeWM predict check", _vs_upstream(o))}  # noqa: E731
        from gymnasium.spaces import Box

        s, h = plan_cfg["num_samples"], plan_cfg["horizon"]
        solver = upstream.cem.CEMSolver(model, batch_size=1, num_samples=s, var_scale=1.0,
                                        n_steps=plan_cfg["n_steps"], topk=plan_cfg["topk"], device="cpu",
                                        seed=seed)
        space = Box(-np.inf, np.inf, shape=(1, a // LEWM_ACTION_BLOCK), dtype=np.float32)
        solver.configure(action_space=space, n_envs=1,
                         config=types.SimpleNamespace(horizon=h, action_block=LEWM_ACTION_BLOCK))
        # JEPA.rollout reads the history length from pixels' time axis and get_cost needs a goal entry;
        # neither is encoded since emb / goal_emb are given.
        info_dict = {"pixels": torch.zeros(1, 1, 1), "goal": torch.zeros(1, 1, 1),
                     "emb": torch.from_numpy(history[None]), "goal_emb": torch.from_numpy(goal[None, None])}

        def torch_plan() -> dict[str, np.ndarray]:
            solver.torch_gen.manual_seed(seed)  # every solve from the same draws
            with contextlib.redirect_stdout(io.StringIO()):  # solve() prints its time
                out = solver.solve(dict(info_dict))
            return {"actions": out["actions"][0].numpy(), "cost": np.float32(out["costs"][0])}

        plan_opts["noise"] = solver_draws(torch, seed, plan_cfg["n_steps"], s, h, a)

        def check_plan(o: dict[str, Any]) -> dict[str, Any]:
            return {
                "plan_actions_max_rel_err": _vs_upstream(o, lambda p: p["actions"]),
                "final_elite_cost_rel_err": {
                    n: rel_err(p["cost_per_iteration"][-1], o[UP]["cost"]) for n, p in o.items() if n != UP},
            }

    cells = [{"cell": "lewm_step", "K": k, "T": window, **time_cell(step, rounds, check=check)}]
    _report(f"lewm_step K={k}", cells[-1])
    plan: dict[str, Callable[[], Any]] = {
        ft: partial(world.plan_latents, c, history, goal, **plan_opts) for ft, c in ctxs.items()}
    if upstream is not None:
        plan[UP] = torch_plan
    cells.append({"cell": "lewm_plan", "K": plan_cfg["num_samples"], **plan_cfg,
                  **time_cell(plan, rounds, check=check_plan)})
    _report("lewm_plan", cells[-1])
    return cells


def upstream_detail(up: Upstream, threads: int) -> dict[str, Any]:
    v = up.versions
    return {
        "ac": f"cc-vjepa2 {v['cc-vjepa2']} (a PyPI package of Meta's vjepa2 code): "
              "vjepa2.models.ac_predictor.vit_ac_predictor (VisionTransformerPredictorAC) at the released "
              "config, random weights; its checkpoint (Meta's layout) converted by jepa-convert --family "
              "vjepa2_ac into the GGUFs jepa runs. The rollout and CEM around it are jepa.planning's "
              "(Meta's CEM and pose update live in the vjepa2 repository's notebooks, not in the package), "
              "so the CEM cells compare the predictors under one planner.",
        "lewm": f"stable-worldmodel {v['stable-worldmodel']}: LeWM (stable_worldmodel.wm.lewm: LeWM, "
                "Predictor, Embedder, MLP) planned by its CEMSolver: upstream code, not a transcription. "
                "Its weights.pt (+ a random HF ViT encoder, published layout) and config.json converted "
                "by jepa-convert --family lewm. Both sides plan from given embeddings (upstream through "
                "the info-dict keys its LeWM caches, emb and goal_emb; neither encodes); jepa replays "
                "the solver's torch.Generator draws (noise=), so both plan on the same candidates.",
        "torch_threads": up.torch.get_num_threads(),
        "jepa_threads": threads,
        "jepa_context": "Model.context(threads) defaults: max_batch 32 (larger K runs in chunks of 32), "
                        "flash_attn auto",
        "import_shims": up.shims,
        "agreement": "max |jepa - upstream| / max |upstream| per cell; jepa f32 beyond "
                     f"{CHECK_MAX_REL} on a predictor stops the run",
        "ratios": "upstream / jepa: ratio_upstream_over is the median over rounds of the ratio within a "
                  f"round; goal {GOAL} for jepa f32 (meets_goal), {AC_CEM_GOALS[4]} for the AC CEM "
                  "iteration at H = 4",
    }


def run(threads: int, rounds: int, *, quick: bool, smoke: bool, ac_layers: int | None, seed: int = 0,
        with_upstream: bool = True, only: str | None = None,
        ac_rounds: tuple[int, int] | None = None, ftypes: tuple[str, ...] = FTYPES,
        isa: str = "native") -> dict[str, Any]:
    from jepa.testing.random_world import write_random_ac, write_random_lewm

    if smoke:
        ac_cfg, lewm_cfg, plan_cfg, k_lewm = dict(AC_SMOKE), dict(LEWM_SMOKE), SMOKE_LEWM_PLAN, 16
    else:
        ac_cfg, lewm_cfg = dict(AC_FULL), dict(LEWM_FULL)
        plan_cfg, k_lewm = (QUICK_LEWM_PLAN if quick else LEWM_PLAN), LEWM_K
        ac_cfg["n_layer"] = ac_layers or (QUICK_AC_LAYERS if quick else AC_FULL["n_layer"])
    if ac_rounds is None:
        full_depth = ac_cfg["n_layer"] == AC_FULL["n_layer"] and not smoke
        ac_rounds = FULL_AC_ROUNDS if full_depth else (rounds, rounds)
    up = load_upstream(threads) if with_upstream else None
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    commit = git_commit()  # at the start: a commit made while the run goes on is not what it measured
    t0 = time.perf_counter()
    cells: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if only in (None, "ac"):
            if up is not None:
                ac, pred = ac_upstream(up, ac_cfg, Path(tmp), seed, ftypes)
            else:
                ac, pred = {ft: write_random_ac(Path(tmp) / f"ac-{ft}.gguf", seed=seed, ftype=ft, **ac_cfg)
                            for ft in ftypes}, None
            print(f"[ac] files ready ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
            ac_c, checks["ac_predictor"] = ac_cells(ac, threads, ac_rounds, seed, pred)
            cells += ac_c
            del pred
            for p in ac.values():
                Path(p).unlink()
        if only in (None, "lewm"):
            if up is not None:
                lw, model = lewm_upstream(up, lewm_cfg, Path(tmp), seed, ftypes)
            else:
                lw, model = {ft: write_random_lewm(Path(tmp) / f"lewm-{ft}.gguf", seed=seed, ftype=ft,
                                                   **lewm_cfg) for ft in ftypes}, None
            cells += lewm_cells(lw, threads, rounds, seed, k_lewm, plan_cfg, up, model)
    reduced = []
    if not smoke and ac_cfg["n_layer"] != AC_FULL["n_layer"]:
        reduced.append(f"AC predictor {ac_cfg['n_layer']} of {AC_FULL['n_layer']} blocks (--ac-layers)")
    if not smoke and plan_cfg != LEWM_PLAN:
        reduced.append(f"LeWM plan {plan_cfg['num_samples']} samples x {plan_cfg['n_steps']} steps "
                       f"(eval: {LEWM_PLAN['num_samples']} x {LEWM_PLAN['n_steps']})")
    if not smoke and min(ac_rounds) < rounds and only != "lewm":
        reduced.append(f"AC cells {ac_rounds[0]} timed round(s) at K = {AC_K[0]} and {ac_rounds[1]} at K = "
                       f"{AC_K[1]} (a K = {AC_K[1]} round of all variants takes tens of minutes here); "
                       f"LeWM cells {rounds}")
    if up is None:
        summary = "not measured in this run (--no-upstream)"
    else:
        v = up.versions
        summary = (f"measured side by side (torch {v['torch']}, threads={threads} on both sides): "
                   f"V-JEPA 2-AC is cc-vjepa2 {v['cc-vjepa2']}'s VisionTransformerPredictorAC (the CEM "
                   f"cells under jepa.planning's CEM), LeWM is stable-worldmodel "
                   f"{v['stable-worldmodel']}'s LeWM with its CEMSolver; ratios upstream / jepa (goal "
                   f"{GOAL} for f32, {AC_CEM_GOALS[4]} for the AC CEM iteration at H = 4) and agreement per "
                   "cell in the JSON")
    return {
        "started": started,
        "commit": commit,
        "seconds": round(time.perf_counter() - t0, 1),
        "quick": quick,
        "smoke": smoke,
        "reduced": reduced,
        "machine": cpu_info(threads, up),
        "isa": isa,
        "versions": versions(up),
        "config": {
            "ac": {**ac_cfg, "tokens_per_frame": (ac_cfg["img_size"] // ac_cfg["patch_size"]) ** 2,
                   "K": list(AC_K), "H": AC_H, "cem_H": list(AC_CEM_GOALS),
                   "cem": "samples K, topk min(10, K/2), 1 iteration",
                   "rounds": dict(zip(map(str, AC_K), ac_rounds, strict=True)), "warmup_rounds": 0,
                   "warmup": f"the agreement call on K = {AC_CHECK_K} (every variant)"},
            "lewm": {**lewm_cfg, "K_step": k_lewm, "plan": plan_cfg, "history_frames": 1, "rounds": rounds,
                     "warmup_rounds": 1, "action_block": LEWM_ACTION_BLOCK},
            "weights": (f"random (jepa.testing.random_weights' rule on the upstream modules, seed {seed}), "
                        "converted by jepa-convert" if up
                        else f"random (jepa.testing.random_world), seed {seed}"),
        },
        "upstream": summary,
        "upstream_detail": None if up is None else upstream_detail(up, threads),
        "checks": checks,
        "cells": cells,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="jepa's context threads and torch.set_num_threads")
    ap.add_argument("--rounds", type=int, default=3,
                    help="timed rounds per LeWM cell (after 1 warm-up round)")
    ap.add_argument("--ac-rounds", type=int, nargs=2, default=None, metavar=("R16", "R64"),
                    help=f"timed rounds of the AC cells at K = {AC_K[0]} and {AC_K[1]} (no warm-up round; "
                    f"default {FULL_AC_ROUNDS[0]} {FULL_AC_ROUNDS[1]} at the released depth, else --rounds)")
    ap.add_argument("--quick", action="store_true",
                    help=f"CPU-sized: AC predictor {QUICK_AC_LAYERS} blocks, LeWM plan "
                    f"{QUICK_LEWM_PLAN['n_steps']} CEM steps (all widths and token counts as released)")
    ap.add_argument("--smoke", action="store_true", help="tiny dims, 1 round: checks the script runs")
    ap.add_argument("--ac-layers", type=int, default=None, help="AC predictor blocks (24 released)")
    ap.add_argument("--only", choices=("ac", "lewm"), default=None, help="one model's cells only")
    ap.add_argument("--no-upstream", action="store_true",
                    help="jepa only (no torch, cc-vjepa2 or stable-worldmodel needed)")
    ap.add_argument("--isa", choices=("native", "avx2"), default="native",
                    help="avx2: both sides held to AVX2 (JEPA_GEMM=avx2; oneDNN, MKL and ATen capped), the "
                    "stand-in for an AVX2-only CPU -> bench-world-avx2.json")
    ap.add_argument("--ftypes", nargs="+", choices=FTYPES, default=list(FTYPES),
                    help="jepa's weight files (f32 always runs: the goals are set against it)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None,
                    help=f"JSON to write (default {DEFAULT_OUT}, {AVX2_OUT} with --isa avx2; {SMOKE_OUT} for "
                    "--smoke)")
    args = ap.parse_args(argv)
    if args.isa == "avx2":
        os.environ.update(AVX2_ENV)  # before torch and jepa are imported (each reads its switch once)
    rounds = 1 if args.smoke else args.rounds
    data = run(args.threads, rounds, quick=args.quick, smoke=args.smoke, ac_layers=args.ac_layers,
               seed=args.seed, with_upstream=not args.no_upstream, only=args.only,
               ac_rounds=None if args.ac_rounds is None else tuple(args.ac_rounds),
               ftypes=tuple(dict.fromkeys(["f32", *args.ftypes])), isa=args.isa)
    out = args.out or (SMOKE_OUT if args.smoke else AVX2_OUT if args.isa == "avx2" else DEFAULT_OUT)
    write_record(out, data, indent=2)
    print(f"wrote {out} ({data['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
