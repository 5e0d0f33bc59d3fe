"""The world models' sizes (released and --smoke) and their upstream code, set up once for every
benchmark that runs them (bench.world, bench.gpu; the sizes also bench.world_plan, bench.world_half,
bench.ac_cache, bench.server):

- V-JEPA 2-AC: Meta's `VisionTransformerPredictorAC` as the cc-vjepa2 package ships it
  (`vjepa2.models.ac_predictor.vit_ac_predictor`), with random weights; its state dict, in the released
  checkpoint's layout, goes through `jepa-convert --family vjepa2_ac`;
- LeWM: stable-worldmodel's LeWM (`stable_worldmodel.wm.lewm`) and its `CEMSolver`; its state dict plus a
  random HF-ViT encoder, saved as the published `weights.pt` + Hydra `config.json`, goes through
  `jepa-convert --family lewm`.

So both sides run the same weights by construction. The peers are requirements/bench.txt's."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import sys
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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
FTYPES = ("f32", "f16", "bf16")  # jepa's files of each model: the exact class and the two half-class ones
AC_H = 2  # the AC predictor step's frames (a rollout's longest prefix at horizon 2)
LEWM_ACTION_BLOCK = 5  # PushT's frameskip: an action block is 5 env actions of 2
LEWM_PLAN = dict(num_samples=300, topk=30, n_steps=30, horizon=5)  # config/eval/solver/cem.yaml, PushT
SMOKE_LEWM_PLAN = dict(num_samples=16, topk=4, n_steps=2, horizon=5)


@dataclass
class Upstream:
    """torch and the peers' model code, imported unmodified, and what was shimmed to import it."""

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


def random_files(kind: str, cfg: dict[str, int], tmp: Path, seed: int,
                 ftypes: tuple[str, ...]) -> dict[str, str]:
    """jepa's random writer's GGUFs of the world model `kind` ("ac" | "lewm") at these dims, one per file
    type (numpy only: no torch, no peers)."""
    from jepa.testing.random_world import write_random_ac, write_random_lewm

    write = write_random_ac if kind == "ac" else write_random_lewm
    return {ft: write(tmp / f"{kind}-{ft}.gguf", seed=seed, ftype=ft, **cfg) for ft in ftypes}


def world_files(kind: str, up: Upstream | None, cfg: dict[str, int], tmp: Path, seed: int,
                ftypes: tuple[str, ...]) -> tuple[dict[str, str], Any]:
    """The world model `kind`'s GGUFs, one per file type, and its upstream module: converted from the
    upstream code's random weights where `up` is given (ac_upstream, lewm_upstream), else random_files
    and None."""
    if up is None:
        return random_files(kind, cfg, tmp, seed, ftypes), None
    return (ac_upstream if kind == "ac" else lewm_upstream)(up, cfg, tmp, seed, ftypes)


def solver_draws(torch: Any, seed: int, n_steps: int, num_samples: int, horizon: int, a: int,
                 device: str = "cpu") -> np.ndarray:
    """The standard-normal draws CEMSolver.solve makes from its torch.Generator(seed) on `device`, in
    order, in jepa's replay layout [n_steps, num_samples, horizon, A] (a CUDA generator draws other
    numbers than the CPU's, so a solver on a GPU is replayed from the GPU's)."""
    g = torch.Generator(device=device).manual_seed(seed)
    return np.stack([torch.randn(1, num_samples, horizon, a, generator=g, device=device,
                                 dtype=torch.float32)[0].cpu().numpy() for _ in range(n_steps)])


def rel_err(x: Any, ref: Any) -> float:
    """max |x - ref| / max |ref|, 3 significant digits."""
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    scale = float(np.abs(ref).max()) or 1.0
    return float(f"{float(np.abs(x - ref).max()) / scale:.3g}")

