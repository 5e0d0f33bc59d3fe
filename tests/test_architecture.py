"""The house's two rules (tools/import_graph.py): no import circle in python/jepa, server/jepa_server
or tools/ (its scripts and the bench package), and nothing outside jepa (the server, tools/, .ci/)
uses its private names or its extension. Each guard is shown to catch a planted violation, so a
guard that silently finds nothing fails here too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import import_graph  # noqa: E402


@pytest.mark.parametrize("package", sorted(import_graph.PACKAGES))
def test_no_import_circle(package: str) -> None:
    edges = import_graph.graph(package, import_graph.PACKAGES[package])
    assert len(edges) > 10  # the package was read
    assert import_graph.circles(edges) == []
    floors = import_graph.layers(edges)
    assert max(floors.values()) >= 5  # layered, not flat: the walk followed the imports


def test_no_import_circle_in_tools() -> None:
    edges = import_graph.tool_graph()
    assert {"bench.harness", "bench.gpu", "render_docs"} <= set(edges)  # tools/ and bench/ were read
    assert "bench.harness" in edges["bench.gpu"]  # `from bench import harness` is an arrow
    assert import_graph.circles(edges) == []
    assert max(import_graph.layers(edges).values()) >= 3


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_circle_guard_catches_one(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "from .a import A\nfrom .b import B\n",  # a face: its arrows are not circles
        "a.py": "from .b import B\nA = 1\n",
        "b.py": "def f():\n    from .sub.c import C  # a lazy import counts: it runs\n    return C\nB = 2\n",
        "sub/__init__.py": "",
        "sub/c.py": "from ..a import A\nC = 3\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .e import E\n",
        "e.py": "from . import d\nE = 4\n",  # d -> e for the type checker only: a circle all the same
        "f.py": "from .a import A\n",  # above the circle, not in it
    })
    edges = import_graph.graph("pkg", root)
    assert import_graph.circles(edges) == [["pkg.a", "pkg.b", "pkg.sub.c"], ["pkg.d", "pkg.e"]]
    assert edges["pkg.e"] == {"pkg.d"} and edges["pkg.d"] == {"pkg.e"} and edges["pkg.f"] == {"pkg.a"}
    with pytest.raises(ValueError, match="circle"):
        import_graph.layers(edges)


def test_nothing_outside_jepa_uses_its_private_names() -> None:
    files = import_graph.outside_files()
    assert len(files) > 20
    read = {f.relative_to(ROOT).parts[0] for f in files}
    assert {"server", "tools", ".ci"} <= read
    assert ROOT / "tools" / "bench" / "harness.py" in files and ROOT / ".ci" / "gpu_check.py" in files
    assert import_graph.crossings(files) == []


def test_the_boundary_guard_catches_each_form(tmp_path: Path) -> None:
    src = tmp_path / "outside.py"
    src.write_text(
        "import jepa\n"
        "import jepa._engine\n"
        "from jepa.model import _parse_device, Model\n"
        "from jepa import _engine\n"
        "print(jepa.__version__, jepa.Model)\n"  # dunders and public names are fine
        "jepa._engine.has_cuda()\n"
        "import importlib, importlib.util\n"
        "importlib.util.find_spec('jepa._engine')\n"
        "importlib.import_module('jepa.model._parse_device')\n"
        "importlib.import_module('jepa.cpu')\n"  # a public module by name is fine
        "print('jepa._engine')\n"  # a string that imports nothing is not a reach
    )
    found = [(c.line, c.name) for c in import_graph.crossings([src], tmp_path)]
    assert found == [
        (2, "jepa._engine"),
        (3, "jepa.model._parse_device"),
        (4, "jepa._engine"),
        (6, "jepa._engine"),
        (8, "jepa._engine"),
        (9, "jepa.model._parse_device"),
    ]


def test_the_guards_read_tools_and_ci(tmp_path: Path) -> None:
    """A planted checkout: a circle between two bench modules, and reaches into jepa's extension from
    a benchmark, a flat tool and a CI script. Both rules find them where the tree's check looks."""
    root = tmp_path / "checkout"
    for name, text in {
        "server/jepa_server/__init__.py": "",
        "tools/bench/__init__.py": "",
        "tools/bench/harness.py": "from bench import gpu\n",
        "tools/bench/gpu.py": "import jepa\nfrom bench import harness\nv = jepa._engine.ggml_version()\n",
        "tools/render.py": "from bench.harness import x\nfrom jepa import _engine\n",
        ".ci/check.py": "import jepa._engine as e\n",
    }.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    edges = import_graph.tool_graph(root / "tools")
    assert import_graph.circles(edges) == [["bench.gpu", "bench.harness"]]
    assert edges["render"] == {"bench.harness"}
    found = [(c.file, c.name) for c in import_graph.crossings(import_graph.outside_files(root), root)]
    assert found == [(".ci/check.py", "jepa._engine"), ("tools/bench/gpu.py", "jepa._engine"),
                     ("tools/render.py", "jepa._engine")]


def test_the_extension_file_has_a_public_name() -> None:
    """jepa.engine_file(): the tools record which build ran without reaching into jepa._engine."""
    import importlib.util

    import jepa

    spec = importlib.util.find_spec("jepa._engine")
    assert spec is not None and spec.origin is not None
    assert Path(jepa.engine_file()) == Path(spec.origin) and Path(jepa.engine_file()).is_file()


def test_the_tool_checks_the_tree(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["import_graph.py", "--check"])
    assert import_graph.main() == 0
    assert capsys.readouterr().out == ""
