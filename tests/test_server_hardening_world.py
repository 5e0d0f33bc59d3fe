"""Issue 10 on /rollout (the reference bundle's tiny V-JEPA 2-AC file): compute is bounded before it
runs, inputs that overflow inside the model are refused, and time is bounded: a plan stops between
steps at its deadline, when its client leaves, and on SIGTERM, which ends the process in bounded
time; the worker is free again at once each time."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from test_server_support import ServerProcess, assert_envelope, http, metric, server_process

from jepa.client import encode_item

from conftest import AC_BUNDLE as AC

pytestmark = pytest.mark.torch

DEADLINE = 3.0
# Within --max-rollout-work (64 × 8 × 64 = 32768) but a minute or more of predictor work here.
LONG_PLAN = {"samples": 64, "topk": 8, "cem_steps": 64, "horizon": 8}


def _body(plan: dict[str, Any] | None = None, actions: Any = None) -> dict[str, Any]:
    u8, s = np.load(AC / "frames_u8.npy"), np.load(AC / "states.npy")[0, 0]
    body: dict[str, Any] = {"context": [dict(encode_item(u8[0]))], "goal": dict(encode_item(u8[1])),
                            "state": s.tolist()}
    if plan is not None:
        body["plan"] = plan
    if actions is not None:
        body["actions"] = actions
    return body


@pytest.fixture(scope="module")
def ac_server(tiny_ac_path: str) -> Iterator[ServerProcess]:
    with server_process("--model", tiny_ac_path, "--port", "0", "--threads", "2",
                        "--request-timeout-s", str(DEADLINE)) as s:
        yield s


def _small_rollout_is_prompt(server: ServerProcess) -> None:
    """The one worker is free: a one-step rollout answers in well under the long plan's time."""
    started = time.monotonic()
    reply = http(server.url + "/rollout", "POST", _body(actions=[[[0.01, 0, 0, 0, 0, 0, 0.5]]]))
    assert reply.status == 200, reply.body[:300]
    assert time.monotonic() - started < 5


def test_compute_over_the_budget_is_refused_before_it_runs(ac_server: ServerProcess) -> None:
    """The issue's plan at the old limits (samples 4096, cem_steps 100, horizon 64; a 552-byte body)
    kept both workers busy for over 6 minutes."""
    started = time.monotonic()
    reply = http(ac_server.url + "/rollout", "POST",
                 _body(plan={"samples": 4096, "topk": 4096, "cem_steps": 100, "horizon": 64}))
    err = assert_envelope(reply, 400)
    assert err["code"] == "too_much_work" and err["param"] == "plan"
    assert "--max-rollout-work" in err["message"]
    assert time.monotonic() - started < 2
    acts = np.zeros((1024, 65, 7)).tolist()  # 1024 × 65 candidate-steps: over 65536
    reply = http(ac_server.url + "/rollout", "POST", _body(actions=acts))
    assert assert_envelope(reply, 400)["param"] == "actions"


def test_actions_that_overflow_in_the_model_are_refused(ac_server: ServerProcess) -> None:
    for value in (3e38, -1e7):
        err = assert_envelope(http(ac_server.url + "/rollout", "POST",
                                   _body(actions=[[[value, 0, 0, 0, 0, 0, 0.5]]])), 400)
        assert err["param"] == "actions" and "magnitude" in err["message"]
    # At the bound the model's answer is finite: an answer, not a serialisation error.
    reply = http(ac_server.url + "/rollout", "POST", _body(actions=[[[1e6, -1e6, 1e6, 1e6, 0, 0, 1e6]]]))
    assert reply.status == 200, reply.body[:300]
    body = _body(actions=[[[0.01, 0, 0, 0, 0, 0, 0.5]]])
    body["state"] = [3e38] * 7
    assert assert_envelope(http(ac_server.url + "/rollout", "POST", body), 400)["param"] == "state"


def test_a_plan_stops_at_its_deadline(ac_server: ServerProcess) -> None:
    started = time.monotonic()
    err = assert_envelope(http(ac_server.url + "/rollout", "POST", _body(plan=LONG_PLAN)), 504)
    took = time.monotonic() - started
    assert err["code"] == "deadline_exceeded" and "--request-timeout-s" in err["message"]
    assert DEADLINE <= took < DEADLINE + 3, took
    _small_rollout_is_prompt(ac_server)


def test_a_plan_whose_client_left_is_dropped(ac_server: ServerProcess) -> None:
    host, port = ac_server.url.removeprefix("http://").rsplit(":", 1)
    payload = json.dumps(_body(plan=LONG_PLAN)).encode()
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /rollout HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
        time.sleep(1.0)  # the plan is running
    time.sleep(0.5)
    _small_rollout_is_prompt(ac_server)
    text = http(ac_server.url + "/metrics").body.decode()
    assert metric(text, "jepa_requests_total", {"endpoint": "/rollout", "status": "499"}) >= 1


def test_sigterm_ends_a_running_plan_and_the_process_in_bounded_time(tiny_ac_path: str) -> None:
    shutdown = 2.0
    with server_process("--model", tiny_ac_path, "--port", "0", "--threads", "2",
                        "--shutdown-timeout-s", str(shutdown)) as server:
        replies: list[Any] = []

        def plan() -> None:
            try:
                replies.append(http(server.url + "/rollout", "POST", _body(plan=LONG_PLAN)))
            except OSError as exc:  # the connection closed under it: also an end
                replies.append(exc)

        t = threading.Thread(target=plan, daemon=True)
        t.start()
        time.sleep(1.5)  # the plan is running
        assert server.proc is not None
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=shutdown + 15)
        took = time.monotonic() - started
        t.join(10)
    assert server.proc.returncode == 0
    assert took < shutdown + 8, took  # in-flight time, then a rollout step and the workers' exit
    # The plan's client got an answer (503, shutting down) or a closed connection, never a hang.
    assert not t.is_alive() and replies
    assert isinstance(replies[0], OSError) or replies[0].status == 503, replies[0]
