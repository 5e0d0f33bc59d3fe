"""The world-model kinds are data (jepa.world_kinds): every record is complete, a kind added to the
table reaches the library's checks and the server's /rollout parser and budgets with no other
change, and no module outside the table branches on a kind's name (with a test that the guard
catches one)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jepa import world
from jepa._engine import PredictorKind
from jepa.model import world_model_name as name_of
from jepa.world_kinds import LEWM, WORK_FIELDS, WORLD_KINDS, WorldKind

ROOT = Path(__file__).resolve().parents[1]
# Where the sources live whose branches the table replaces. The file format's own declarations
# (jepa/gguf: the values jepa.pred.kind may spell) and the converters' family names are another
# concept: neither branches on a loaded model's kind.
SOURCES = sorted([*(ROOT / "python/jepa").rglob("*.py"), *(ROOT / "server/jepa_server").rglob("*.py")])
EXEMPT = {ROOT / "python/jepa/world_kinds.py"}


# ---- every record complete ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(WORLD_KINDS))
def test_every_kind_has_each_field(name: str) -> None:
    kind = WORLD_KINDS[name]
    assert kind.name == name and kind.pred_kind.name.lower() == name  # the file's jepa.pred.kind spelling
    assert name_of(kind.pred_kind) == name
    for f in dataclasses.fields(WorldKind):
        value = getattr(kind, f.name)
        if f.name != "pool":
            assert value is not None and value != "", f"{name}.{f.name} is unset"
    for f in ("latents", "rollout", "objective", "planner", "planner_args", "latent_floats"):
        assert callable(getattr(kind, f)), f"{name}.{f}"
    assert kind.goal_ndim in (1, 2)
    # Every plan option names one of the planner's own keywords; the work fields are among them and
    # their defaults are counts.
    params = inspect.signature(kind.planner).parameters
    for field, option in kind.plan_fields.items():
        assert option in params and params[option].kind is inspect.Parameter.KEYWORD_ONLY, (name, field)
    for field in WORK_FIELDS:
        assert isinstance(kind.planner_default(kind.plan_fields[field]), int), (name, field)


def test_the_server_takes_every_plan_option_of_every_kind() -> None:
    from jepa_server.rollout import _PLAN_INTS, _PLAN_NUMBERS

    for kind in WORLD_KINDS.values():
        assert set(kind.plan_fields) <= {*_PLAN_INTS, *_PLAN_NUMBERS}, kind.name


def test_only_world_predictors_have_a_kind() -> None:
    assert name_of(PredictorKind.NONE) == name_of(PredictorKind.MASKED) == ""
    assert {name_of(k.pred_kind) for k in WORLD_KINDS.values()} == set(WORLD_KINDS)


# ---- a kind added to the table is reachable everywhere --------------------------------------------


def _fake_cem(objective: Any, *, horizon: int = 3, num: int = 7, iters: int = 11, topk: int = 2,
              seed: int = 0) -> dict[str, Any]:
    raise AssertionError("a parse never plans")


FAKE = dataclasses.replace(
    LEWM,
    name="fake",
    title="Fake-WM",
    planner=_fake_cem,
    plan_fields={"samples": "num", "horizon": "horizon", "cem_steps": "iters", "topk": "topk",
                 "seed": "seed"},
    latent_floats=lambda model, k, h: 1000 * k * h,
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The fake kind in the table, and a model of that kind (as much of a jepa.Model as is read)."""
    monkeypatch.setitem(WORLD_KINDS, FAKE.name, FAKE)
    info = SimpleNamespace(pred_action_dim=2, pred_state_dim=0)
    return SimpleNamespace(world_model=FAKE.name, info=info)


def _parse(model: Any, **body: Any) -> Any:
    from jepa_server.inputs import Limits
    from jepa_server.rollout import parse_world_job

    body = {"context": ["a.png"], **body}
    return parse_world_job(body, model, "m", lambda path, param: path, Limits(max_items=8, max_frames=8))


def test_a_new_kind_reaches_the_library_checks(fake: SimpleNamespace) -> None:
    import jepa

    assert world.check_state(fake, None) is None  # type: ignore[arg-type]
    with pytest.raises(jepa.InvalidInputError, match="a Fake-WM model takes no robot state"):
        world.check_state(fake, [1.0, 2.0])  # type: ignore[arg-type]


def test_a_new_kind_reaches_the_server_parser(fake: SimpleNamespace) -> None:
    from jepa_server.errors import ApiError

    job = _parse(fake, goal="b.png", plan={"samples": 5, "cem_steps": 2, "topk": 3})
    assert job.plan == {"num": 5, "iters": 2, "topk": 3}  # the fake planner's own names
    with pytest.raises(ApiError) as e:
        _parse(fake, goal="b.png", plan={"maxnorm": 0.1})
    assert e.value.param == "plan.maxnorm" and "samples, horizon, cem_steps, topk, seed" in e.value.message
    with pytest.raises(ApiError) as e:
        _parse(fake, actions=[[0.0, 1.0]], state=[1.0])
    assert (e.value.param, e.value.code) == ("state", "invalid_value")  # a kind that takes no state
    assert _parse(fake, actions=[[0.0, 1.0]]).actions.shape == (1, 1, 2)
    with pytest.raises(ApiError) as e:
        _parse(SimpleNamespace(world_model="", info=fake.info), actions=[[0.0, 1.0]])
    assert e.value.code == "not_a_world_model" and "Fake-WM" in e.value.message


def test_a_new_kind_reaches_the_server_budgets(fake: SimpleNamespace) -> None:
    from jepa_server.budget import rollout_work, world_bytes
    from jepa_server.rollout import request_field
    from jepa_server.settings import FLOAT_JSON_BYTES

    assert rollout_work("fake", None, {"num": 5}) == 5 * 3 * 11  # horizon and iters: the planner's defaults
    assert rollout_work("fake", None, {"num": 5, "horizon": 2, "iters": 4}) == 40
    assert rollout_work("fake", (6, 4), None) == 24
    extra = world_bytes(fake, 2, 3, True) - world_bytes(fake, 2, 3, False)
    assert extra == FAKE.latent_floats(fake, 2, 3) * FLOAT_JSON_BYTES  # its latents, in JSON
    assert request_field("iters", "fake") == "plan.cem_steps"
    assert request_field("num", "fake") == "plan.samples"


# ---- no branch on a kind's name outside the table -------------------------------------------------


def _kind_expr(node: ast.AST) -> bool:
    """An expression that holds a world kind's name: `x.world_model`, `kind`, `x.kind`, `_kind(...)`."""
    if isinstance(node, ast.Call):
        return "kind" in ast.unparse(node.func)
    if isinstance(node, ast.Attribute):
        return node.attr in ("world_model", "kind")
    return isinstance(node, ast.Name) and node.id == "kind"


def kind_branches(source: str, names: set[str]) -> list[int]:
    """Lines that compare a kind expression with a kind's name, or spell a table of two or more kinds
    ({"ac": ..., "lewm": ...}, ("ac", "lewm"))."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = any(isinstance(o, ast.Constant) and o.value in names for o in operands)
            if named and any(_kind_expr(o) for o in operands):
                lines.append(node.lineno)
        elems = [*node.keys, *node.values] if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if isinstance(node, ast.Dict | ast.Tuple | ast.List | ast.Set) and elems is not None:
            spelled = {e.value for e in elems if isinstance(e, ast.Constant) and e.value in names}
            if len(spelled) >= 2:
                lines.append(node.lineno)
    return lines


def test_no_module_branches_on_a_kind_name() -> None:
    names = set(WORLD_KINDS)
    found = []
    for path in SOURCES:
        if path in EXEMPT or {"convert", "gguf"} & set(path.relative_to(ROOT).parts):
            continue
        found += [f"{path.relative_to(ROOT)}:{n}" for n in kind_branches(path.read_text(), names)]
    assert not found, f"a branch on a world kind's name outside jepa/world_kinds.py: {found}"


def test_the_guard_catches_a_branch() -> None:
    names = set(WORLD_KINDS)
    assert kind_branches('if model.world_model == "ac":\n    pass\n', names) == [1]
    assert kind_branches('x = 1 if kind != "lewm" else 2\n', names) == [1]
    assert kind_branches('NAMES = {"ac": 1, "lewm": 2}\n', names) == [1]
    assert kind_branches('K = {PredictorKind.AC: "ac", PredictorKind.LEWM: "lewm"}\n', names) == [1]
    assert kind_branches('if _kind(ctx, "predictor") == "ac":\n    pass\n', names) == [1]
    # A pool mode or a file family that happens to share a kind's name is not a kind branch.
    assert kind_branches('if mode == "lewm":\n    pass\nF = {"vjepa2": 1, "lewm": 2}\n', names) == []
    # And it reads the files it must.
    assert {ROOT / "python/jepa/world.py", ROOT / "server/jepa_server/budget.py"} <= set(SOURCES)
