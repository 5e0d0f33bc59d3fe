"""tools/bench/portable.py --smoke: the two builds' children run in turn and the record is complete. This
checkout's interpreter stands in for the portable wheel's (tests/test_portable_wheel.py builds that one),
so the two sides run the same build and differ only by the machine's noise."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import smoke_record


def test_bench_portable_smoke(tmp_path: Path) -> None:
    data = smoke_record("bench/portable.py", tmp_path / "p.json", "--threads", "1",
                        "--portable-python", sys.executable)
    assert data["smoke"] and data["benchmark"] == "bench-portable" and data["commit"]
    cells = {(c["ftype"], c["batch"]) for c in data["cells"]}
    assert cells == {("f32", 1), ("f32", 2), ("bf16", 1), ("bf16", 2)}
    for c in data["cells"]:
        assert set(c["ms_per_img"]) == set(c["builds"]) == {"native", "portable"}
        assert all(v > 0 for v in c["ms_per_img"].values()) and c["portable_over_native"] > 0
        # The same interpreter on both sides: the same kernels.
        assert c["builds"]["native"] == c["builds"]["portable"]
        assert c["builds"]["native"]["matmul"].startswith("jepa")
