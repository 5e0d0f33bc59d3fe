"""Every model kind run once on fixed inputs, the outputs (float32) saved to an .npz with the kernel
line: the child process of test_kernel_paths.py (one per JEPA_GEMM path) and of
test_portable_wheel.py (the portable wheel on an emulated AVX2-only CPU).

    python tests/kernel_path_outputs.py OUT.npz MODELS.json

MODELS.json maps a name (vit, vit_f16, vit_bf16, vit_q8_0, vit_i8c, vjepa2, text, ac, lewm) to its GGUF
path, and "reference" to the reference bundles' folder (conftest's REFERENCE_DIR); run() is how the
tests start it and read the result back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import jepa
from jepa import world
from jepa.text import embed_text

SENTENCES = [
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "a",
    "cat",
    "one two three four five six",
]


def run(
    python: str, models: Path, dst: Path, cap: str = "", launcher: Sequence[str] = (), timeout: float = 600
) -> dict[str, np.ndarray]:
    """Run this script with `python` (under `launcher`, e.g. an emulator) and JEPA_GEMM=cap; return
    its outputs, "kernels" holding the kernel line."""
    env = {**os.environ, "JEPA_GEMM": cap}
    cmd = [*launcher, python, str(Path(__file__).resolve()), str(dst), str(models)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr[-4000:]}"
    with np.load(dst) as z:
        return {k: z[k] for k in z.files}


def widens_bf16(line: str) -> bool:
    """Kernel line 'f32/f16: X; bf16: X': bf16 weights widened to the f32 kernel (the exact chains);
    a bf16 kernel of their own (AMX, AVX512-BF16) is the half class, with its own bits."""
    parts = dict(part.split(": ", 1) for part in line.split("; "))
    return parts["f32/f16"] == parts["bf16"]


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def image_outputs(path: str, out: dict[str, np.ndarray], name: str) -> None:
    m = jepa.Model(path)
    ctx = m.context(threads=2)
    s = m.info.img_size
    px = rng(1).standard_normal((3, 3, s, s)).astype(np.float32)
    out[f"{name}.tokens"] = ctx.encode(px)
    out[f"{name}.alone"] = ctx.encode(px[1:2])


def main() -> None:
    dst, models = sys.argv[1], json.loads(Path(sys.argv[2]).read_text())
    ref = Path(models["reference"])
    out: dict[str, np.ndarray] = {}
    for name in ("vit", "vit_f16", "vit_bf16", "vit_q8_0", "vit_i8c"):
        image_outputs(models[name], out, name)
    m = jepa.Model(models["vjepa2"])
    ctx = m.context(threads=2)
    i = m.info
    clip = rng(2).standard_normal((2, 3, i.n_frames, i.img_size, i.img_size)).astype(np.float32)
    tokens = ctx.encode(clip)
    out["vjepa2.tokens"] = tokens
    out["vjepa2.logits"] = ctx.classify(tokens)[0]
    t = jepa.Model(models["text"]).context(threads=2)
    out["text.batch"] = embed_text(t, SENTENCES)
    out["text.alone"] = np.concatenate([embed_text(t, [s]) for s in SENTENCES])
    ac = jepa.Model(models["ac"]).context(threads=2)
    g = {n: np.load(ref / "vjepa2_ac" / f"{n}.npy") for n in ("z_ctx", "z_goal", "rollout_actions", "states")}
    r = world.rollout_latents(
        ac, g["z_ctx"][0], g["rollout_actions"], g["z_goal"][0], state=g["states"][0, 0], return_latents=True
    )
    out["ac.latents"], out["ac.energies"] = r["latents"], r["energies"]
    lw = jepa.Model(models["lewm"]).context(threads=2)
    emb = world.latents(lw, np.load(ref / "lewm" / "pixels.npy")[0])
    cand = rng(3).standard_normal((6, 5, lw.model.info.pred_action_dim)).astype(np.float32)
    r = world.rollout_latents(lw, emb[:1], cand, emb[3], return_latents=True)
    out["lewm.latents"], out["lewm.costs"] = r["latents"], r["costs"]
    for k, v in out.items():
        assert v.dtype == np.float32, (k, v.dtype)
    np.savez(dst, kernels=np.array(jepa.cpu_kernels()), **out)


if __name__ == "__main__":
    main()
