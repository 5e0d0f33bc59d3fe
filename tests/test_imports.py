"""The core imports light: `import jepa` needs numpy and the extension only. Extras are imported
where they belong (torch never at module level; aiohttp only in the server; gguf/safetensors only
in the converter, the GGUF writer and the demo writer; Pillow/PyAV/tqdm only in the media pipeline
and the CLI)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"torch", "transformers", "safetensors", "gguf", "PIL", "av", "tqdm", "aiohttp", "prometheus_client",
         "tokenizers"}

# Module-level imports each part of the tree may make beyond the stdlib, numpy and jepa itself.
ALLOWED: dict[str, set[str]] = {
    "python/jepa/convert": {"gguf", "safetensors"},
    "python/jepa/gguf": {"gguf"},
    "python/jepa/demo.py": {"gguf"},
    "python/jepa/media": {"PIL", "av", "tqdm"},
    "python/jepa/pipeline.py": set(),
    "python/jepa/cli": {"PIL", "av", "tqdm"},
    "server/jepa_server": {"aiohttp", "prometheus_client", "PIL", "av", "gguf"},
}


def module_level_imports(source: str) -> set[str]:
    """Top-level package names imported at module level (not inside functions or TYPE_CHECKING)."""
    names: set[str] = set()
    tree = ast.parse(source)

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            elif isinstance(node, ast.If):
                test = ast.unparse(node.test)
                if "TYPE_CHECKING" not in test:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)

    visit(tree.body)
    return names


def allowed_for(rel: str) -> set[str]:
    allowed: set[str] = set()
    for prefix, extras in ALLOWED.items():
        if rel == prefix or rel.startswith(prefix.rstrip("/") + "/") or rel.startswith(prefix + "."):
            allowed |= extras
    return allowed


def violations() -> list[str]:
    out = []
    for path in sorted([*ROOT.glob("python/jepa/**/*.py"), *ROOT.glob("server/jepa_server/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        bad = (module_level_imports(path.read_text()) & HEAVY) - allowed_for(rel)
        out.extend(f"{rel}: {name}" for name in sorted(bad))
    return out


def test_no_heavy_module_level_imports() -> None:
    assert violations() == []


def test_the_guard_catches_one() -> None:
    src = "import os\nimport torch\nfrom aiohttp import web\ndef f():\n    import PIL\n"
    assert module_level_imports(src) == {"os", "torch", "aiohttp"}
    assert (module_level_imports(src) & HEAVY) - allowed_for("python/jepa/model.py") == {"torch", "aiohttp"}
    assert "aiohttp" in allowed_for("server/jepa_server/app.py")


def test_import_jepa_loads_no_extra() -> None:
    code = f"import sys, jepa; print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("name", ["errors", "model", "pooling"])
def test_core_modules_are_stdlib_and_numpy(name: str) -> None:
    src = (ROOT / "python" / "jepa" / f"{name}.py").read_text()
    light = {"__future__", "os", "typing", "numpy", "collections", "dataclasses"}
    assert module_level_imports(src) - light == set()


def test_import_bounds_the_barrier_spin() -> None:
    # libgomp reads GOMP_SPINCOUNT when the extension loads it: `import jepa` sets a bounded spin
    # unless the environment already has one (a fresh interpreter, so the import is the first).
    code = "import os, jepa; print(os.environ['GOMP_SPINCOUNT'])"
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "10000"
    env["GOMP_SPINCOUNT"] = "5"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "5"


def test_jepa_text_after_a_plain_import() -> None:
    # `import jepa` then `jepa.text.embed_text(...)` (the README's text example): the submodule is
    # imported on first use, not by `import jepa`, and its extra (tokenizers) not even then.
    code = (
        "import sys, jepa\n"
        "before = 'jepa.text' in sys.modules\n"
        "f = jepa.text.embed_text\n"
        "after = 'jepa.text' in sys.modules\n"
        "print(before, after, 'tokenizers' in sys.modules, jepa.text is sys.modules['jepa.text'])\n"
        "try:\n"
        "    jepa.no_such_name\n"
        "except AttributeError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    missing = "module 'jepa' has no attribute 'no_such_name'"
    assert out.stdout.splitlines() == ["False True False True", missing]
