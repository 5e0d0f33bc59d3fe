"""/rollout on world models (the reference bundles' tiny V-JEPA 2-AC and LeWM files): the server's
answers are in-process jepa.rollout / jepa.plan's, bit for bit through JSON (a float32 as a JSON
number round-trips exactly); refusals name their field and leave the server healthy; the Python
client's rollout works end to end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from test_server_support import (
    ServerProcess,
    assert_envelope,
    decode_embeddings,
    http,
    in_process,
    run,
    server_process,
)

import jepa
from jepa.client import Client, ServerError, encode_item

from conftest import AC_BUNDLE as AC
from conftest import LEWM_BUNDLE as LEWM
from conftest import bits

pytestmark = pytest.mark.torch


def lg(name: str) -> np.ndarray:
    return np.load(LEWM / f"{name}.npy")


def ag(name: str) -> np.ndarray:
    return np.load(AC / f"{name}.npy")


@pytest.fixture(scope="module")
def ac_server(tiny_ac_path: str) -> Iterator[ServerProcess]:
    with server_process("--model", str(tiny_ac_path), "--port", "0", "--threads", "2") as s:
        yield s


@pytest.fixture(scope="module")
def lewm_server(tiny_lewm_path: str) -> Iterator[ServerProcess]:
    with server_process("--model", str(tiny_lewm_path), "--port", "0", "--threads", "2") as s:
        yield s


def post(server: ServerProcess, body: dict[str, Any]) -> dict[str, Any]:
    reply = http(server.url + "/rollout", "POST", body)
    assert reply.status == 200, reply.body[:400]
    assert float(reply.headers["x-inference-time"]) > 0
    return dict(reply.json())


def same_bits(got: Any, want: np.ndarray) -> None:
    np.testing.assert_array_equal(bits(np.asarray(got, dtype=np.float32)), bits(want))


def frame(u8: np.ndarray) -> dict[str, str]:
    return dict(encode_item(u8))  # a PNG: the server sees exactly these pixels


# ---- V-JEPA 2-AC ----------------------------------------------------------------------------------


def test_ac_rollout_equals_in_process(ac_server: ServerProcess, tiny_ac_path: str) -> None:
    u8, s, acts = ag("frames_u8"), ag("states")[0, 0], ag("rollout_actions")
    got = post(ac_server, {"context": [frame(u8[0])], "actions": acts.tolist(), "goal": frame(u8[1]),
                           "state": s.tolist(), "return_latents": True})
    want = jepa.rollout(jepa.Model(tiny_ac_path).context(threads=1), u8[0], acts, goal=u8[1], state=s,
                        return_latents=True)
    assert (got["object"], got["kind"], got["best"]) == ("rollout", "ac", want["best"])
    for key in ("energies", "states", "latents"):
        same_bits(got[key], want[key])
    assert set(got) == {"object", "model", "kind", "energies", "best", "states", "latents"}
    # One sequence [H][7] is one candidate; no latents unless asked.
    one = post(ac_server, {"context": frame(u8[0]), "actions": acts[2].tolist(), "goal": frame(u8[1]),
                           "state": s.tolist()})
    same_bits(one["energies"], want["energies"][2:3])
    assert one["best"] == 0 and "latents" not in one


def test_ac_plan_equals_in_process(ac_server: ServerProcess, tiny_ac_path: str) -> None:
    u8, s = ag("frames_u8"), ag("states")[0, 0]
    plan = {"samples": 6, "topk": 3, "cem_steps": 2, "horizon": 2, "seed": 5, "maxnorm": 0.05,
            "gripper_clamp": 0.5}
    body = {"context": [frame(u8[0])], "goal": frame(u8[1]), "state": s.tolist(), "plan": plan}
    got = post(ac_server, body)
    want = jepa.plan(jepa.Model(tiny_ac_path).context(threads=1), u8[0], u8[1], state=s, **plan)
    assert (got["object"], got["kind"]) == ("plan", "ac")
    same_bits(got["actions"], want["actions"])
    same_bits(got["energy_per_iteration"], want["energy_per_iteration"])
    assert np.asarray(got["actions"]).shape == (2, 7)


# ---- LeWM -----------------------------------------------------------------------------------------


def test_lewm_rollout_equals_in_process(lewm_server: ServerProcess, tiny_lewm_path: str) -> None:
    u8, cand = lg("frames_u8"), lg("cand_hist")[0]
    got = post(lewm_server, {"context": [frame(f) for f in u8[:3]], "actions": cand.tolist(),
                             "goal": frame(u8[3]), "return_latents": True})
    want = jepa.rollout(jepa.Model(tiny_lewm_path).context(threads=1), list(u8[:3]), cand, goal=u8[3],
                        return_latents=True)
    assert (got["object"], got["kind"], got["best"]) == ("rollout", "lewm", want["best"])
    same_bits(got["costs"], want["costs"])
    same_bits(got["latents"], want["latents"])
    assert "energies" not in got and "states" not in got


def test_lewm_plan_equals_in_process(lewm_server: ServerProcess, tiny_lewm_path: str) -> None:
    u8 = lg("frames_u8")
    got = post(lewm_server, {"context": [frame(u8[0])], "goal": frame(u8[3]),
                             "plan": {"samples": 8, "topk": 3, "cem_steps": 2, "horizon": 3, "seed": 9}})
    want = jepa.plan(jepa.Model(tiny_lewm_path).context(threads=1), u8[0], u8[3], num_samples=8, topk=3,
                     n_steps=2, horizon=3, seed=9)
    assert (got["object"], got["kind"]) == ("plan", "lewm")
    same_bits(got["actions"], want["actions"])
    same_bits(got["cost_per_iteration"], want["cost_per_iteration"])


# ---- refusals, each followed by /health -----------------------------------------------------------

def _refusals(u8: np.ndarray, dim: int) -> list[tuple[str, dict[str, Any], str, str]]:
    ctx, goal = [frame(u8[0])], frame(u8[-1])
    acts = np.zeros((2, 2, dim), np.float32).tolist()
    return [
        ("wrong action dim", {"context": ctx, "actions": np.zeros((2, 2, dim + 1)).tolist()}, "actions",
         "invalid_shape"),
        ("plan without goal", {"context": ctx, "plan": {"samples": 4}}, "goal", "invalid_value"),
        ("actions and plan", {"context": ctx, "goal": goal, "actions": acts, "plan": {}}, "actions",
         "invalid_value"),
        ("too many candidates", {"context": ctx, "actions": np.zeros((1025, 1, dim)).tolist()}, "actions",
         "invalid_shape"),
        ("plan samples over the cap", {"context": ctx, "goal": goal, "plan": {"samples": 5000}},
         "plan.samples", "invalid_value"),
        ("undecodable frame", {"context": [{"b64": "bm90IGFuIGltYWdl"}], "actions": acts}, "context",
         "invalid_input"),
    ]


def _check_refusal(server: ServerProcess, body: dict[str, Any], param: str, code: str) -> dict[str, Any]:
    err = assert_envelope(http(server.url + "/rollout", "POST", body), 400)
    assert (err["param"], err["code"]) == (param, code), err
    assert http(server.url + "/health").json()["status"] == "ok"
    return err


def test_ac_refusals_then_health(ac_server: ServerProcess) -> None:
    u8, s = ag("frames_u8"), ag("states")[0, 0].tolist()
    for _, body, param, code in _refusals(u8, 7):
        _check_refusal(ac_server, {**body, "state": s}, param, code)
    ctx, acts = [frame(u8[0])], np.zeros((1, 2, 7)).tolist()
    err = _check_refusal(ac_server, {"context": ctx, "actions": acts}, "state", "invalid_value")
    assert "state is required" in err["message"]  # jepa.world.check_state's message, the one check
    _check_refusal(ac_server, {"context": ctx, "actions": acts, "state": [0.0] * 6}, "state", "invalid_shape")
    _check_refusal(ac_server, {"context": ctx, "plan": {}, "state": s}, "goal", "invalid_value")
    err = _check_refusal(ac_server, {"context": ctx, "actions": np.zeros((2, 6)).tolist(), "state": s},
                         "actions", "invalid_shape")
    assert "[K, H, 7]" in err["message"]  # jepa.world.check_actions': the model's action width


def test_lewm_refusals_then_health(lewm_server: ServerProcess) -> None:
    u8 = lg("frames_u8")
    for _, body, param, code in _refusals(u8, int(lg("actions").shape[-1])):
        _check_refusal(lewm_server, body, param, code)
    ctx, goal = [frame(u8[0])], frame(u8[3])
    acts = np.zeros((1, 2, 10)).tolist()
    body = {"context": ctx, "actions": acts, "state": [0.0] * 7}
    _check_refusal(lewm_server, body, "state", "invalid_value")
    body = {"context": ctx, "goal": goal, "plan": {"maxnorm": 0.1}}
    err = _check_refusal(lewm_server, body, "plan.maxnorm", "invalid_value")
    assert "num_samples" not in err["message"] and "samples" in err["message"]
    # Fewer actions than history frames: the library's refusal, as a 400 naming the field.
    body = {"context": [frame(f) for f in u8[:3]], "actions": acts}
    err = _check_refusal(lewm_server, body, "actions", "invalid_input")
    assert "pair with the history" in err["message"]


def test_the_planners_own_checks_come_back_naming_the_request_field(
    ac_server: ServerProcess, lewm_server: ServerProcess
) -> None:
    # topk <= samples is the planner's check, not the server's: its typed refusal names its option,
    # which the server names back as the field the request sent (LeWM's planner calls it topk too).
    u8, s = ag("frames_u8"), ag("states")[0, 0].tolist()
    body = {"context": [frame(u8[0])], "goal": frame(u8[1]), "plan": {"samples": 4, "topk": 5}}
    err = _check_refusal(ac_server, {**body, "state": s}, "plan.topk", "invalid_input")
    assert "topk=5" in err["message"]
    lu8 = lg("frames_u8")
    body = {"context": [frame(lu8[0])], "goal": frame(lu8[3]), "plan": {"samples": 4, "topk": 5}}
    _check_refusal(lewm_server, body, "plan.topk", "invalid_input")


def test_engine_arguments_map_to_request_fields() -> None:
    from jepa_server.rollout import request_field

    assert request_field("num_samples", "lewm") == "plan.samples"  # the planner's own names
    assert request_field("n_steps", "lewm") == "plan.cem_steps"
    assert request_field("cem_steps", "ac") == "plan.cem_steps"
    assert request_field("topk", "ac") == request_field("topk", "lewm") == "plan.topk"
    for arg in ("frames", "history", "context"):
        assert request_field(arg, "ac") == "context"
    assert request_field("state", "ac") == "state" and request_field("goal", "lewm") == "goal"
    assert request_field("pixels", "ac") is None and request_field(None, "ac") is None


def test_a_refusal_is_mapped_by_its_param_never_by_its_message(
    tiny_ac_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        # A message that starts with another field's name: only `param` may decide.
        raise jepa.InvalidInputError("frames and actions look fine, the pose does not", param="state")

    monkeypatch.setattr(jepa, "rollout", refuse)
    u8, s = ag("frames_u8"), ag("states")[0, 0].tolist()
    body = {"context": [frame(u8[0])], "actions": np.zeros((1, 2, 7)).tolist(), "state": s}

    async def go() -> None:
        async with in_process(jepa.Model(tiny_ac_path), threads=1) as (client, _):
            resp = await client.post("/rollout", json=body)
            err = (await resp.json())["error"]
            assert resp.status == 400 and (err["param"], err["code"]) == ("state", "invalid_input"), err

    run(go)


def test_lewm_embeddings_pool_through_the_projector(lewm_server: ServerProcess, tiny_lewm_path: str) -> None:
    # The LeWM pool is declared by the model (its default): accepted without a probe, computed on
    # the worker's context, the bits jepa.embed gives.
    u8 = lg("frames_u8")
    reply = http(lewm_server.url + "/v1/embeddings", "POST", {"input": [frame(f) for f in u8[:2]]})
    assert reply.status == 200, reply.body[:300]
    want = jepa.embed(jepa.Model(tiny_lewm_path).context(threads=2), list(u8[:2]), pool="lewm")
    same_bits(decode_embeddings(reply.json()), want)


# ---- the Python client ----------------------------------------------------------------------------


def test_client_rollout_end_to_end(ac_server: ServerProcess, tiny_ac_path: str) -> None:
    u8, s, acts = ag("frames_u8"), ag("states")[0, 0], ag("rollout_actions")
    client = Client(ac_server.url)
    got = client.rollout([u8[0]], actions=acts, goal=u8[1], state=s)
    ctx = jepa.Model(tiny_ac_path).context(threads=1)
    want = jepa.rollout(ctx, u8[0], acts, goal=u8[1], state=s)
    same_bits(got["energies"], want["energies"])
    assert got["best"] == want["best"]
    plan = client.rollout([u8[0]], goal=u8[1], state=s, plan={"samples": 5, "topk": 2, "cem_steps": 1})
    want_plan = jepa.plan(ctx, u8[0], u8[1], state=s, samples=5, topk=2, cem_steps=1)
    same_bits(plan["actions"], want_plan["actions"])
    with pytest.raises(ServerError) as e:
        client.rollout([u8[0]], actions=acts[..., :6], state=s)
    assert e.value.status == 400 and e.value.param == "actions"
