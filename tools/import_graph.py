"""The import graph of the two Python packages (python/jepa, server/jepa_server) and of the tools
(tools/: the scripts and the bench package), read from the source with ast (nothing is imported),
and the two rules that keep the house in order:

- no circle: no module reaches itself through imports, lazy imports inside functions and the
  type checker's (`if TYPE_CHECKING:`) included: a circle the type checker needs is one in the
  design. A package's __init__.py is its face: it re-exports, and its arrows are not counted.
- one boundary: nothing outside python/jepa (the server, tools/, .ci/) imports a private name of
  jepa (`_parse_device`) or its extension (`jepa._engine`), by name or by a constant given to
  importlib (`find_spec("jepa._engine")`), nor reaches one as an attribute
  (`jepa._engine.has_cuda()`).

    python tools/import_graph.py            # each package's modules by layer, then any violation
    python tools/import_graph.py --check    # exit 1 on a circle or a boundary crossing

tests/test_architecture.py runs both rules on the tree and on planted violations."""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Each package: its import name and where it lies.
PACKAGES = {"jepa": ROOT / "python" / "jepa", "jepa_server": ROOT / "server" / "jepa_server"}
# The tools: run as scripts with tools/ on the path, so their modules are named from there
# (`render_docs`, `bench.harness`).
TOOLS = ROOT / "tools"
# The code that uses jepa from outside it, under a checkout: the server, the tools, CI's scripts.
OUTSIDE = ("server/jepa_server", "tools", ".ci")
# The calls that import a module named by a string (`importlib.import_module("jepa._engine")`).
IMPORT_CALLS = {"import_module", "importlib.import_module", "find_spec", "util.find_spec",
                "importlib.util.find_spec", "__import__"}


@dataclass(frozen=True)
class Crossing:
    """A private name of jepa used outside it: where, and what."""

    file: str
    line: int
    name: str


def module_name(package: str, root: Path, path: Path) -> str:
    """The dotted name of the module at path; package "" for a folder on the path (tools/)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(p for p in [package, *parts] if p)


def modules(package: str, root: Path) -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    return {module_name(package, root, p): p for p in sorted(root.rglob("*.py"))}


def _imports(tree: ast.Module, name: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import anywhere in the module, relative ones resolved."""
    here = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            yield mod, node.lineno
            for alias in node.names:  # `from . import errors`: a module, when there is one
                yield f"{mod}.{alias.name}", node.lineno


def graph(package: str, root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a package's __init__ has no arrows: its face)."""
    mods = modules(package, root)
    out: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for target, _ in _imports(tree, name, False):
            if target in mods and target != name and mods[target].name != "__init__.py":
                out[name].add(target)
    return out


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return sorted(found)


def layers(edges: dict[str, set[str]]) -> dict[str, int]:
    """Each module's floor: 1 for a module importing none of its package, else one above the
    highest it imports (a circle's modules are not given one)."""
    floor: dict[str, int] = {}

    def of(m: str, seen: frozenset[str]) -> int:
        if m in floor:
            return floor[m]
        if m in seen:
            raise ValueError(f"a circle through {m}")
        f = 1 + max((of(d, seen | {m}) for d in edges[m]), default=0)
        floor[m] = f
        return f

    for m in sorted(edges):
        of(m, frozenset())
    return floor


def _private(name: str) -> bool:
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in name.split("."))


def _imported_by_call(node: ast.Call) -> str | None:
    """The module a call to importlib (or __import__) names by a constant, else None."""
    if ast.unparse(node.func) not in IMPORT_CALLS or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def crossings(files: Iterable[Path], base: Path = ROOT) -> list[Crossing]:
    """Private names of jepa used by code outside it: `import jepa._engine`, `from jepa.model import
    _parse_device`, `from jepa import _engine`, `importlib.util.find_spec("jepa._engine")` (and
    import_module, __import__), and `jepa._engine` reached as an attribute."""
    out = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = str(path.relative_to(base)) if path.is_relative_to(base) else str(path)
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.split(".")[0] == "jepa"]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] == "jepa":
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Call):
                target = _imported_by_call(node)
                names = [target] if target and target.split(".")[0] == "jepa" else []
            elif isinstance(node, ast.Attribute) and ast.unparse(node.value) == "jepa":
                names = [f"jepa.{node.attr}"]
            out += [Crossing(rel, node.lineno, n) for n in names if _private(n)]
    return sorted(set(out), key=lambda c: (c.file, c.line, c.name))


def outside_files(root: Path = ROOT) -> list[Path]:
    """The code that uses jepa from outside, in the checkout at root: the server package, the tools
    and CI's scripts (OUTSIDE), every Python file of each."""
    return sorted(p for d in OUTSIDE for p in (root / d).rglob("*.py"))


def tool_graph(tools: Path = TOOLS) -> dict[str, set[str]]:
    """The tools' imports among themselves: the scripts of tools/ and the bench package's modules."""
    return graph("", tools)


def _summary(path: Path) -> str:
    """A module's docstring's first sentence (what it is), one line."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    end = first.find(". ")
    return (first[: end + 1] if end >= 0 else first).replace("|", "\\|")


def render_modules() -> str:
    """docs/architecture.md's table of modules: each package's floors from the top (a module stands
    above everything it imports), each module with its docstring's first sentence."""
    lines = []
    for package, root in PACKAGES.items():
        mods = modules(package, root)
        floors = layers(graph(package, root))
        lines += ["", f"`{package}` ({len(mods)} modules, {max(floors.values())} floors):", "",
                  "| floor | module | what it is |", "|---:|---|---|"]
        order = sorted(mods, key=lambda m: (-floors[m], m))
        lines += [f"| {floors[m]} | `{m}` | {_summary(mods[m])} |" for m in order]
    return "\n".join(lines[1:]) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 on a circle or a boundary crossing")
    args = ap.parse_args()
    bad = 0
    for comp in circles(tool_graph()):
        print(f"circle in tools/: {' <-> '.join(comp)}")
        bad += 1
    for package, root in PACKAGES.items():
        edges = graph(package, root)
        found = circles(edges)
        for comp in found:
            print(f"circle in {package}: {' <-> '.join(comp)}")
        bad += len(found)
        if not args.check and not found:
            by_floor: dict[int, list[str]] = {}
            for m, f in layers(edges).items():
                by_floor.setdefault(f, []).append(m)
            for f in sorted(by_floor, reverse=True):
                print(f"{package} floor {f}: {', '.join(sorted(by_floor[f]))}")
    for c in crossings(outside_files()):
        print(f"{c.file}:{c.line}: {c.name} is private to jepa")
        bad += 1
    return 1 if bad and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
