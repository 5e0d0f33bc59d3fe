"""tools/bench/ac_cache.py --smoke: both variants of every cell timed, bit-identical, their frame
blocks and the cache's bytes per candidate recorded (the formula jepa_world_rollout documents)."""

from __future__ import annotations

from pathlib import Path

from conftest import smoke_record


def test_bench_ac_cache_smoke(tmp_path: Path) -> None:
    args = ("--threads", "1", "--K", "3", "--H", "1", "3", "--memory")
    data = smoke_record("bench/ac_cache.py", tmp_path / "c.json", *args)
    assert data["smoke"] and [(c["K"], c["H"]) for c in data["cells"]] == [(3, 1), (3, 3)]
    assert data["benchmark"] == "bench-ac-cache" and data["machine"]["kernels"] == data["held"]["jepa"]
    cfg = data["config"]
    for c in data["cells"]:
        assert set(c["ms"]) == {"cache", "recompute"} and c["agreement"] == {"bit_identical": True}
        h = c["H"]
        assert c["frame_blocks_per_candidate"] == {"cache": h, "recompute": h * (h + 1) // 2}
        per = 2 * cfg["n_layer"] * (h - 1) * (2 + cfg["tokens_per_frame"]) * cfg["embed_dim"] * 4
        assert c["cache_bytes"]["per_candidate"] == per and c["cache_bytes"]["candidates_per_graph"] == 3
        assert set(c["peak_mb_over_model"]) == {"cache", "recompute"}
