"""Planning end to end, with no recorded energies: the converted file -> the numpy reference
predictor -> rollouts -> the CEM planners, fed only with upstream's random draws, must rank the
candidates as upstream did and return upstream's plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jepa.convert import convert
from jepa.planning import ac_cem, ac_energy_fn, lewm_cem, lewm_cost_fn

from conftest import AC_BUNDLE, LEWM_BUNDLE
from numpy_reference import assert_cem_replays, cem_golden, cem_options, from_gguf
from numpy_reference.lewm import LeWM
from numpy_reference.vjepa2_ac import ACWorldModel

AC, LEWM = AC_BUNDLE, LEWM_BUNDLE
pytestmark = [
    pytest.mark.torch,
]
TOL = 1e-5


def test_ac_plan_from_the_converted_file(tmp_path: Path) -> None:
    wm = from_gguf(convert(AC / "checkpoint.pt", tmp_path / "ac.gguf", family="vjepa2_ac", img_size=96))
    assert isinstance(wm, ACWorldModel) and wm.encoder is not None
    clip, states = np.load(AC / "input_clip.npy"), np.load(AC / "states.npy")
    z = wm.encode_frames(clip[0].transpose(1, 0, 2, 3)).astype(np.float32)  # from the pixels
    ref = cem_golden(AC, "ac")
    energy = ac_energy_fn(wm.predict, z[0], states[0, 0], z[1])
    out = ac_cem(energy, noise=ref["cem_noise"], trace=True, **cem_options(AC, "ac"))
    assert_cem_replays(out, ref, "ac", tol=TOL)


def test_lewm_plan_from_the_converted_file(tmp_path: Path) -> None:
    m = from_gguf(convert(LEWM, tmp_path / "lewm.gguf", family="lewm"))
    assert isinstance(m, LeWM)
    pixels = np.load(LEWM / "pixels.npy")[0]
    history, goal = m.embed(pixels[:1]).astype(np.float32), m.embed(pixels[3:])[0].astype(np.float32)
    ref = cem_golden(LEWM, "lewm")
    cost = lewm_cost_fn(m.predict, history, goal)
    out = lewm_cem(cost, action_dim=10, noise=ref["cem_noise"], trace=True, **cem_options(LEWM, "lewm"))
    assert_cem_replays(out, ref, "lewm", tol=TOL)
