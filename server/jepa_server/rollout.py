"""The /rollout request: its JSON parsed and checked into a WorldJob, and an engine refusal's
argument named back as the request field it came from.

The request is validated whole first (so a malformed one is refused the same way on any model),
then against the model (a world model, its action width, `state`, its planner's options). Checks
the planner owns (topk <= samples, ...) are the planner's: its typed refusal names the option, and
`request_field` turns that name into the field the caller sent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import jepa
from jepa.world_kinds import WORLD_KINDS, WorldKind

from .errors import bad_request
from .inputs import (
    Item,
    Limits,
    Resolver,
    _opt_int,
    check_keys,
    numeric_array,
    opt_bool,
    opt_number,
    parse_item,
)


@dataclass(frozen=True)
class WorldJob:
    """A validated /rollout request: a rollout of `actions`, or a plan when `plan` is given."""

    context: Item
    goal: Item | None
    actions: np.ndarray | None  # [K, H, A]
    state: np.ndarray | None
    plan: dict[str, Any] | None  # the planner's own keyword arguments
    return_latents: bool = False


# Plan fields: (lowest, highest) for the integers; the highest bound the work one request may ask.
_PLAN_INTS: dict[str, tuple[int, int | None]] = {
    "samples": (1, 4096),
    "topk": (1, 4096),
    "cem_steps": (1, 100),
    "horizon": (1, 64),
    "seed": (0, None),
}
_PLAN_NUMBERS = ("maxnorm", "gripper_clamp")  # both more than 0
# The planners' own names of these fields are each world kind's `plan_fields` (jepa.world_kinds); a
# field missing there is refused.
_ACTION_SHAPES = "[K][H][dim] (K candidate sequences) or [H][dim]"
MAX_CANDIDATES = 1024  # K of `actions`
MAX_STEPS = 64  # H of `actions`


def parse_world_job(
    body: dict[str, Any], model: jepa.Model, model_id: str, resolve: Resolver, limits: Limits
) -> WorldJob:
    """Validate the whole request (the same way on any model), then check the model can run it."""
    context = body.get("context")
    if context is None:
        raise bad_request("'context' is required: the frames the rollout starts from", param="context")
    ctx_item = _frames_item(context, "context", resolve, limits)
    actions, plan = _actions_or_plan(body)
    goal = None
    if body.get("goal") is not None:
        goal = _frames_item(body["goal"], "goal", resolve, limits)
    elif plan is not None:
        raise bad_request("a 'plan' needs a 'goal' to plan towards", param="goal")
    state = None
    if body.get("state") is not None:
        state = numeric_array(body["state"], "state", (1, 2), "[dim] or [T][dim]")
    return_latents = opt_bool(body, "return_latents", False)
    kind = WORLD_KINDS.get(model.world_model)
    if kind is None:
        raise bad_request(
            f"model {model_id!r} is not a world model: /rollout needs an action-conditioned "
            f"predictor ({', '.join(k.title for k in WORLD_KINDS.values())})",
            code="not_a_world_model",
        )
    if actions is not None:
        actions = _check_actions(model, actions)
    _check_state(model, kind, state)
    options = None if plan is None else _planner_options(kind, plan)
    return WorldJob(ctx_item, goal, actions, state, options, return_latents)


def _actions_or_plan(body: dict[str, Any]) -> tuple[np.ndarray | None, dict[str, Any] | None]:
    """Exactly one of: actions to score, a plan to make."""
    plan = _plan(body.get("plan"))
    if body.get("actions") is None:
        if plan is None:
            raise bad_request("'actions' is required unless a 'plan' is given", param="actions")
        return None, plan
    if plan is not None:
        raise bad_request("give 'actions' to score, or a 'plan' to make some; not both", param="actions")
    return numeric_array(body["actions"], "actions", (2, 3), _ACTION_SHAPES), None


def _frames_item(value: Any, param: str, resolve: Resolver, limits: Limits) -> Item:
    """Frames: a list of frames, or one item (an image, a clip, a video)."""
    return parse_item({"frames": value} if isinstance(value, list) else value, param, resolve, limits)


def _check_actions(model: jepa.Model, actions: np.ndarray) -> np.ndarray:
    try:
        a = jepa.world.check_actions(model, actions)  # the width: jepa.world's one check
    except jepa.InvalidInputError as e:
        raise bad_request(e.message, param="actions", code="invalid_shape") from None
    k, h, d = a.shape
    if k > MAX_CANDIDATES or h > MAX_STEPS:  # the server's own budget
        raise bad_request(
            f"'actions' is [{k}][{h}][{d}]: at most {MAX_CANDIDATES} candidates of {MAX_STEPS} steps",
            param="actions",
            code="invalid_shape",
        )
    return a


def _check_state(model: jepa.Model, kind: WorldKind, state: np.ndarray | None) -> None:
    try:
        jepa.world.check_state(model, state)  # required for AC, refused for LeWM, its width
    except jepa.InvalidInputError as e:
        # A missing or unwanted state is a wrong value; a state of the wrong width a wrong shape.
        code = "invalid_value" if state is None or not kind.takes_state else "invalid_shape"
        raise bad_request(e.message, param="state", code=code) from None


def _planner_options(kind: WorldKind, plan: dict[str, Any]) -> dict[str, Any]:
    names = kind.plan_fields
    for key in plan:
        if key not in names:
            raise bad_request(
                f"'plan.{key}' is not an option of this model's planner; it takes {', '.join(names)}",
                param=f"plan.{key}",
            )
    return {names[k]: v for k, v in plan.items()}


def _plan(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request("'plan' must be an object", param="plan")
    check_keys(value, {*_PLAN_INTS, *_PLAN_NUMBERS}, "plan")
    out: dict[str, Any] = {}
    for key, (lo, hi) in _PLAN_INTS.items():
        if (v := _opt_int(value.get(key), f"plan.{key}", lo, hi)) is not None:
            out[key] = v
    for key in _PLAN_NUMBERS:
        if (f := opt_number(value, key, 0.0)) is not None:
            out[key] = f
    return out


# The engine's argument names (JepaError.param) that are a request field under another name. The
# planner's options are named back through the kind's `plan_fields`.
_ARG_FIELDS = {"frames": "context", "history": "context", "context": "context", "actions": "actions",
               "goal": "goal", "state": "state"}


def request_field(arg: str | None, kind: str) -> str | None:
    """The request field an engine refusal of argument `arg` is about (None: no one field)."""
    if arg is None:
        return None
    record = WORLD_KINDS.get(kind)
    for field, name in (record.plan_fields if record is not None else {}).items():
        if name == arg:
            return f"plan.{field}"
    return _ARG_FIELDS.get(arg)
