"""The committed _engine.pyi is what pybind11-stubgen generates from the built extension."""

from __future__ import annotations

import pytest

from conftest import import_tool, run_tool

gen_stubs = import_tool("gen_stubs")

# Two enums as pybind11-stubgen writes them: docstring with pybind11's Members: list, then methods.
_ENUM = '''class {name}:
    """
    The {name}.

    Members:

      A
    """
    A: typing.ClassVar[{name}]
    __members__: typing.ClassVar[dict[str, {name}]]
    def __eq__(self, other: {name}) -> bool:
        ...
{extra}'''


def test_engine_stub_is_current() -> None:
    r = run_tool("gen_stubs.py", "--check")
    assert r.returncode == 0, r.stderr


def test_enum_methods_are_written_once() -> None:
    tail = "def f() -> int:\n    ...\n"
    out = gen_stubs.compact_enums(
        _ENUM.format(name="First", extra="") + _ENUM.format(name="Second", extra="") + tail
    )
    assert out.count("def __eq__(self, other: typing.Self) -> bool:") == 1
    assert "class First(_PybindEnum):\n" in out and "class Second(_PybindEnum):\n" in out
    assert '    """The First."""\n    A: typing.ClassVar[First]\n' in out
    assert "Members:" not in out
    assert out.index("class _PybindEnum:") < out.index("class First") and out.endswith(tail)


def test_an_enum_with_other_methods_fails_loudly() -> None:
    odd = _ENUM.format(name="Second", extra="    def __lt__(self, other: Second) -> bool:\n        ...\n")
    with pytest.raises(SystemExit, match="enum Second"):
        gen_stubs.compact_enums(_ENUM.format(name="First", extra="") + odd)
