"""Planning end to end, with no recorded energies: the converted file -> the numpy reference
predictor -> rollouts -> the CEM planners, fed only with upstream's random draws, must rank the
candidates as upstream did and return upstream's plan."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from jepa.convert import convert
from jepa.planning import ac_cem, ac_energy_fn, lewm_cem, lewm_cost_fn

from numpy_reference import assert_rel_close, from_gguf
from numpy_reference.lewm import LeWM
from numpy_reference.vjepa2_ac import ACWorldModel

REF = Path(os.environ.get("JEPA_REFERENCE_DIR", Path(__file__).resolve().parents[2] / "shared" / "reference"))
AC, LEWM = REF / "vjepa2_ac", REF / "lewm"
pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(not (AC.is_dir() and LEWM.is_dir()), reason=f"{REF}: reference bundles not found"),
]
TOL = 1e-5


def test_ac_plan_from_the_converted_file(tmp_path: Path) -> None:
    wm = from_gguf(convert(AC / "checkpoint.pt", tmp_path / "ac.gguf", family="vjepa2_ac", img_size=96))
    assert isinstance(wm, ACWorldModel) and wm.encoder is not None
    g = {
        n: np.load(AC / f"{n}.npy")
        for n in (
            "input_clip",
            "states",
            "cem_noise",
            "cem_energy",
            "cem_topk",
            "cem_samples",
            "cem_mean",
            "cem_std",
            "cem_action",
        )
    }
    z = wm.encode_frames(g["input_clip"][0].transpose(1, 0, 2, 3)).astype(np.float32)  # from the pixels
    out = ac_cem(
        ac_energy_fn(wm.predict, z[0], g["states"][0, 0], z[1]),
        horizon=2,
        samples=16,
        topk=4,
        cem_steps=3,
        momentum_mean=0.15,
        momentum_mean_gripper=0.15,
        momentum_std=0.75,
        momentum_std_gripper=0.15,
        maxnorm=0.075,
        noise=g["cem_noise"],
        trace=True,
    )
    assert_rel_close(out["energies"], g["cem_energy"], "cem_energy", rtol=TOL)
    np.testing.assert_array_equal(out["topk"], g["cem_topk"])
    for key in ("samples", "mean", "std"):
        np.testing.assert_allclose(out[key], g[f"cem_{key}"], rtol=0, atol=TOL, err_msg=key)
    np.testing.assert_allclose(out["actions"], g["cem_action"], rtol=0, atol=TOL)


def test_lewm_plan_from_the_converted_file(tmp_path: Path) -> None:
    m = from_gguf(convert(LEWM, tmp_path / "lewm.gguf", family="lewm"))
    assert isinstance(m, LeWM)
    pixels = np.load(LEWM / "pixels.npy")[0]
    g = {
        n: np.load(LEWM / f"{n}.npy")[:, 0]
        for n in ("cem_noise", "cem_candidates", "cem_costs", "cem_topk", "cem_mean", "cem_var")
    }
    history, goal = m.embed(pixels[:1]).astype(np.float32), m.embed(pixels[3:])[0].astype(np.float32)
    out = lewm_cem(
        lewm_cost_fn(m.predict, history, goal),
        action_dim=10,
        horizon=5,
        num_samples=8,
        topk=3,
        n_steps=3,
        noise=g["cem_noise"],
        trace=True,
    )
    assert_rel_close(out["costs"], g["cem_costs"], "cem_costs", rtol=TOL)
    np.testing.assert_array_equal(out["topk"], g["cem_topk"])
    for key in ("candidates", "mean", "var"):
        np.testing.assert_allclose(out[key], g[f"cem_{key}"], rtol=0, atol=TOL, err_msg=key)
    np.testing.assert_allclose(out["actions"], np.load(LEWM / "cem_actions.npy")[0], rtol=0, atol=TOL)
