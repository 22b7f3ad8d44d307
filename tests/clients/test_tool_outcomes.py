"""What the official ORS clients (`openreward` 0.1.167, `ors-sdk` 0.1.0) do with each shape a tool call can answer.

An agent's invalid argument must leave its session usable in both. The server answers it as a `RunToolError`
(`ok: false`, reason `input_validation`): `openreward` raises `ToolCallError` ("call was malformed: tell the model
so it can reformulate", its docs say) and keeps the session; `ors-sdk` raises its `ToolCallError` and keeps it
too. An `error` event, the shape of a crashed tool, makes `openreward` raise `ToolFailed` and mark the session dead
(every later call raises `SessionTerminatedError`), so it is kept for tools that really raised.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def outcomes_server(tmp_path_factory):
    from tests.clients.harness import run_server

    args = ("--env", "frozen_lake", "--env", "tests.ors_envs:MathLike")
    with run_server(tmp_path_factory.mktemp("outcomes"), *args) as running:
        yield running


_results: dict[str, dict] = {}


@pytest.fixture
def outcomes(openreward_python, outcomes_server, run_client, request) -> dict:
    """The script's report for the test's `client`, run once per client for the module."""
    client = request.node.callspec.params["client"]
    if client not in _results:
        url = outcomes_server.url
        _results[client] = run_client(openreward_python, "tool_outcomes.py", url, client, server=outcomes_server)
    return _results[client]


def position(outcome: dict) -> int:
    return json.loads(outcome["blocks"][0]["text"])["position"]


@pytest.mark.parametrize("client", ["openreward", "ors-sdk"])
def test_an_invalid_argument_raises_tool_call_error_and_the_session_plays_on(outcomes, client):
    result = outcomes

    for shape in ("input_error", "wrong_type"):
        call, then = result[shape]["call"], result[shape]["then"]
        assert call["raised"] == "ToolCallError", call
        assert "Tool input validation error" in call["message"]
        if client == "openreward":
            assert call["reason"] == "input_validation"
        assert position(then) == 4, "the session is usable, and the lower-case action is accepted"
    assert "Invalid action 'JUMP'" in result["input_error"]["call"]["message"]


@pytest.mark.parametrize("client", ["openreward", "ors-sdk"])
def test_the_other_shapes_as_each_client_sees_them(outcomes, client):
    result = outcomes

    # `ok: true` with an error text: a normal output to both clients (they cannot tell it is an error).
    error_text = result["error_text"]
    assert error_text["call"]["blocks"][0]["text"] == "Error: that did not work"
    assert error_text["then"]["blocks"][0]["text"] == "still here"
    # An `error` event: openreward gives the session up; ors-sdk raises a bare RuntimeError and plays on.
    crash = result["tool_crash"]
    if client == "openreward":
        assert crash["call"]["raised"] == "ToolFailed"
        assert crash["then"]["raised"] == "SessionTerminatedError"
    else:
        assert crash["call"]["raised"] == "RuntimeError" and "kaboom" in crash["call"]["message"]
        assert crash["then"]["blocks"][0]["text"] == "still here"


@pytest.mark.parametrize("client", ["openreward", "ors-sdk"])
@pytest.mark.parametrize("shape", ["progress_fast", "progress_streamed"])
def test_progress_events_are_skipped_and_the_result_read(outcomes, client, shape):
    played = outcomes[shape]
    assert played["call"]["blocks"][0]["text"] == "counted 5"
    assert played["then"]["blocks"][0]["text"] == "still here"
