"""tools/bench_gpu.py --smoke on the CPU: the GPU benchmark's code (torch and jepa on one device, the
same weights, interleaved rounds, errors against torch f32) runs end to end here, so it cannot rot
between the sessions that have a GPU. tools/gpu_check.sh is checked for the steps it must run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, smoke_record


@pytest.mark.transformers
@pytest.mark.slow
def test_bench_gpu_smoke_on_cpu(tmp_path: Path) -> None:
    data = smoke_record("bench_gpu.py", tmp_path / "g.json", "--device", "cpu")
    assert data["device"] == "cpu" and data["smoke"] and data["gpu"] is None
    cells = {(c["model"], c["batch"]) for c in data["cells"]}
    assert cells == {("vit-tiny", 1), ("vit-tiny", 2), ("vjepa2-tiny", 1)}
    for c in data["cells"]:
        assert set(c["ms_per_item"]) == {"torch-f32", "torch-bf16", "jepa-f32", "jepa-f16"}
        assert all(v > 0 for v in c["ms_per_item"].values())
        assert c["max_rel_error_vs_torch_f32"]["jepa-f32"] < 1e-4
        assert c["max_rel_error_vs_torch_f32"]["jepa-f16"] < 1e-2


def test_gpu_check_script_runs_every_step() -> None:
    text = (ROOT / "tools" / "gpu_check.sh").read_text()
    r = subprocess.run(["bash", "-n", str(ROOT / "tools" / "gpu_check.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    steps = ("-DJEPA_CUDA=ON", "CMAKE_CUDA_ARCHITECTURES", "JEPA_DEVICE=cuda:0", "tests/test_parity_vit.py",
             "tools/bench_gpu.py", "ctest")
    for step in steps:
        assert step in text, step
