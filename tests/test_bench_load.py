"""tools/bench/load.py --smoke: every cell of the cold-load benchmark (f16 and q8_0 files, read into
memory of its own and memory-mapped, cold and warm page cache, two processes on one file) runs in
fresh children on a tiny model; its record holds what docs/serving.md renders, and the figures are
the ones a mapped file must show (its weights mapped, not copied), not timing bars."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import import_tool, smoke_record


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench-load") / "bench-load.json"
    return smoke_record("bench/load.py", out, timeout=300)


def test_the_run_is_recorded(smoke: dict[str, Any]) -> None:
    assert smoke["smoke"] is True and smoke["benchmark"] == "bench-load" and smoke["rounds"] == 1
    assert smoke["commit"] and smoke["versions"]["jepa"] and smoke["machine"]["kernels"]
    assert smoke["engine_changed_during_run"] is False
    assert set(smoke["file_mb"]) == {"f16", "q8_0"} and all(v > 0 for v in smoke["file_mb"].values())


def test_every_cell_ran_in_a_child_of_its_own(smoke: dict[str, Any]) -> None:
    cells = smoke["cells"]
    assert set(cells) == {f"{m}-{mode}-{cache}" for m in ("f16", "q8_0") for mode in ("read", "mmap")
                          for cache in ("cold", "warm")}
    for name, c in cells.items():
        m = c["median"]
        assert len(c["runs"]) == 1 and m["load_s"] > 0 and m["first_s"] > 0, name
        assert m["n_bytes_mb"] > 0, name
        # read: nothing of the file stays mapped; mapped: what is used in place is part of the weights
        # (the matrices the engine's kernels repack get memory of their own either way)
        if c["mode"] == "read":
            assert m["n_bytes_mapped_mb"] == 0, name
        else:
            assert 0 <= m["n_bytes_mapped_mb"] <= m["n_bytes_mb"], name
    assert set(smoke["ratios"]) == {f"{m}-{c}" for m in ("f16", "q8_0") for c in ("cold", "warm")}
    for r in smoke["ratios"].values():
        assert r["load"] > 0 and r["load_and_first"] > 0 and r["rss"] > 0


def test_two_processes_report_while_both_hold_the_file(smoke: dict[str, Any]) -> None:
    pairs = {f"{m}-{mode}" for m in ("f16", "q8_0") for mode in ("read", "mmap")}
    assert set(smoke["two_processes"]) == pairs
    for name, pair in smoke["two_processes"].items():
        for side in ("first", "second"):
            assert pair[side]["pss_while_shared_mb"] > 0 and pair[side]["alone"]["load_s"] > 0, name


def test_the_doc_block_renders_from_it(smoke: dict[str, Any]) -> None:
    render_docs = import_tool("render_docs")
    text = render_docs.RENDERERS["bench-load"](smoke)
    assert text.startswith(render_docs.run_record(smoke))
    assert "| file | weights | page cache |" in text and text.count("\n| f16 (") == 4
    assert "`python tools/bench/load.py`" in text
