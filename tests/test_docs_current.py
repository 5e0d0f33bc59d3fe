"""The generated tables in docs/*.md are what tools/render_docs.py makes from tests/results/*.json and,
for docs/gguf.md, from the GGUF schema's declaration (jepa.gguf.keys / tensors)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_are_current() -> None:
    cmd = [sys.executable, str(ROOT / "tools" / "render_docs.py"), "--check"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_check_catches_a_stale_doc(tmp_path: Path) -> None:
    # The guard itself: a doc whose block does not match its rendering is reported stale.
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import render_docs
    finally:
        sys.path.pop(0)
    stale = "x\n<!-- BEGIN GENERATED: bench-engine -->\nold table\n<!-- END GENERATED: bench-engine -->\ny\n"
    fresh = render_docs.render_doc(stale)
    assert fresh != stale
    assert fresh.startswith("x\n<!-- BEGIN GENERATED: bench-engine -->\n")
    assert fresh.endswith("<!-- END GENERATED: bench-engine -->\ny\n")
    assert render_docs.render_doc(fresh) == fresh


def test_the_schema_tables_come_from_the_declaration() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import render_docs
    finally:
        sys.path.pop(0)
    from jepa.gguf import keys as gguf_keys
    from jepa.gguf import tensors as gguf_tensors

    block = "<!-- BEGIN GENERATED: {0} -->\n{1}<!-- END GENERATED: {0} -->\n"
    stale = block.format("gguf-keys", "| `jepa.enc.embed_dim` | u32 |\n")
    fresh = render_docs.render_doc(stale)
    assert fresh != stale
    assert all(f"| `{k.name}` |" in fresh for k in gguf_keys.KEYS)
    tensors = render_docs.render_doc(block.format("gguf-tensors", ""))
    assert all(f"**{p.title}**" in tensors for p in gguf_tensors.PARTS)
    doc = (ROOT / "docs" / "gguf.md").read_text()
    assert render_docs.render_doc(doc) == doc  # docs/gguf.md is current
