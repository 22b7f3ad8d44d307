"""The OpenEnv face over raw WebSocket frames and HTTP (spec/openenv-face.md), against a real uvicorn server.

OpenEnv's clients take the next frame as the reply to their request, so every test that sends frames also
checks that each request got exactly one reply: a missing or extra frame would shift every later one.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from ors_server.environments.frozen_lake import FrozenLake
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.ors_envs import FAST, FailingSetup, Live, MathLike, create, math_task, new_tag
from tests.raw_http import exchange, websocket_head
from tests.serving import serve
from tests.waiting import wait_until

ENVS = [FrozenLake, MathLike, FailingSetup]
SEED_42_PATH = ["DOWN", "DOWN", "RIGHT", "RIGHT", "DOWN", "RIGHT"]
SEED_42_POSITIONS = [4, 8, 9, 10, 14, 15]
REPLY_TIMEOUT = 10.0


@contextmanager
def openenv_server(**settings: Any) -> Iterator[Live]:
    app = create_app(ENVS, Settings(**{**FAST, **settings}))
    with serve(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield Live(url, app, client)


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with openenv_server() as server:
        yield server


class Frames:
    """One `/ws` connection: `ask` sends a frame and returns the one reply."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    def send(self, frame: Any) -> None:
        self.ws.send(frame if isinstance(frame, str | bytes) else json.dumps(frame))

    def recv(self) -> dict[str, Any]:
        return json.loads(self.ws.recv(timeout=REPLY_TIMEOUT))

    def ask(self, frame: Any) -> dict[str, Any]:
        self.send(frame)
        return self.recv()

    def state(self) -> dict[str, Any]:
        reply = self.ask({"type": "state"})
        assert reply["type"] == "state", reply
        return reply["data"]

    def step(self, data: Any) -> dict[str, Any]:
        reply = self.ask({"type": "step", "data": data})
        assert reply["type"] == "observation", reply
        return reply["data"]

    def closed_with(self) -> int | None:
        """The close code, once the server has closed the socket (after any frames still in flight)."""
        with pytest.raises(ConnectionClosedOK) as closed:
            self.ws.recv(timeout=REPLY_TIMEOUT)
        assert closed.value.rcvd is not None
        return closed.value.rcvd.code


@contextmanager
def frames(
    live: Live, path: str = "/openenv/frozen_lake/ws", headers: dict[str, str] | None = None
) -> Iterator[Frames]:
    url = live.url.replace("http://", "ws://") + path
    with connect(url, open_timeout=REPLY_TIMEOUT, additional_headers=headers) as ws:
        yield Frames(ws)


def move(action: str) -> dict[str, Any]:
    return {"type": "call_tool", "tool_name": "lake_move", "arguments": {"action": action}}


def position(observation_data: dict[str, Any]) -> int:
    return json.loads(observation_data["observation"]["result"]["data"])["position"]


def ping(live: Live, sid: str) -> int:
    return live.client.post("/ping", headers={"X-Session-ID": sid}).status_code


def rpc(live: Live, method: str, params: dict[str, Any] | None = None, path: str = "/openenv/frozen_lake/mcp") -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    response = live.client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


# Observations.


def test_reset_answers_the_episodes_initial_observation(live):
    with frames(live) as ws:
        reply = ws.ask({"type": "reset", "data": {"seed": 42, "episode_id": "ep-1", "bogus": 1}})
    assert reply == {
        "type": "observation",
        "data": {
            "observation": {"position": 0, "grid": "xFHF\nFHFF\nFFFH\nFHFG", "metadata": {}},
            "reward": 0.0,
            "done": False,
        },
    }


def test_a_call_tool_step_answers_a_call_tool_observation_with_the_tools_reward_and_end(live):
    with frames(live) as ws:
        ws.ask({"type": "reset", "data": {"seed": 42}})
        steps = [ws.step(move(action)) for action in SEED_42_PATH]
    first = steps[0]
    assert set(first) == {"observation", "reward", "done", "metadata"}
    assert first["metadata"] == {"prob": 1.0}, "non-empty observation metadata is copied to the top level"
    observation = first["observation"]
    assert set(observation) == {"metadata", "tool_name", "result", "error"}
    assert (observation["tool_name"], observation["error"]) == ("lake_move", None)
    result = observation["result"]
    assert set(result) == {"content", "structured_content", "meta", "data", "is_error"}
    [block] = result["content"]
    assert block == {"type": "text", "text": result["data"], "annotations": None, "meta": None}
    assert result["is_error"] is False
    assert [position(step) for step in steps] == SEED_42_POSITIONS
    assert [step["reward"] for step in steps] == [0.0] * 5 + [1.0]
    assert [step["done"] for step in steps] == [False] * 5 + [True]


def test_state_names_the_session_and_counts_its_steps(live):
    with frames(live) as ws:
        before = ws.state()
        assert before["episode_id"] in live.store
        ws.ask({"type": "reset", "data": {"seed": 42}})
        ws.step(move("DOWN"))
        ws.step({"action": "DOWN"})
        assert ws.state() == {"episode_id": before["episode_id"], "step_count": 2}
        ws.ask({"type": "reset", "data": {"seed": 42}})
        assert ws.state() == {"episode_id": before["episode_id"], "step_count": 0}


@pytest.mark.parametrize("action", [{"type": "list_tools"}, {"type": "list_tools", "metadata": {}}])
def test_list_tools_lists_every_tool_with_its_input_schema_and_is_not_a_step(live, action):
    with frames(live, "/openenv/mathlike/ws") as ws:
        listed = ws.step(action)
        assert ws.state()["step_count"] == 0
    assert (listed["reward"], listed["done"]) == (None, False)
    tools = {tool["name"]: tool for tool in listed["observation"]["tools"]}
    assert set(tools) == set(MathLike.tools)
    assert set(tools["submit"]) == {"name", "description", "input_schema"}
    assert tools["submit"]["input_schema"]["required"] == ["answer"]
    assert tools["noargs"]["input_schema"] == {"type": "object", "properties": {}}


def test_a_one_tool_environment_takes_a_step_without_a_type_as_the_tools_arguments(live):
    with frames(live) as ws:
        ws.ask({"type": "reset", "data": {"seed": 42}})
        assert position(ws.step({"action": "DOWN"})) == 4
        assert position(ws.step({"action": "DOWN", "metadata": {}})) == 8


def test_a_call_without_its_type_is_a_call_tool_action_as_verifiers_sends_it(live):
    # verifiers' OpenEnv taskset sends `{"tool_name", "arguments"}` without `type`; OpenEnv's server defaults it.
    with frames(live) as ws:
        ws.ask({"type": "reset", "data": {"seed": 42}})
        assert position(ws.step({"tool_name": "lake_move", "arguments": {"action": "DOWN"}})) == 4
        unknown = ws.step({"tool_name": "lake_jump", "arguments": {}})
    assert unknown["observation"]["error"]["error_type"] == "tool_not_found"


def test_pydantic_dumps_of_openenvs_actions_are_accepted(live):
    with frames(live) as ws:
        ws.ask({"type": "reset", "data": {"seed": 42}})
        dumped = {**move("DOWN"), "metadata": {}}
        assert position(ws.step(dumped)) == 4


def test_failed_tool_calls_are_observations_with_a_typed_error(live):
    with frames(live, "/openenv/mathlike/ws") as ws:
        ws.ask({"type": "reset", "data": {"task_spec": math_task(tag=new_tag())}})
        unknown = ws.step({"type": "call_tool", "tool_name": "nope", "arguments": {}})
        bad_input = ws.step({"type": "call_tool", "tool_name": "submit", "arguments": {"answer": 4}})
        raised = ws.step({"type": "call_tool", "tool_name": "boom"})
        right = ws.step({"type": "call_tool", "tool_name": "submit", "arguments": {"answer": "4"}})
        after = ws.step({"type": "call_tool", "tool_name": "submit", "arguments": {"answer": "4"}})
    assert unknown == {
        "observation": {
            "metadata": {},
            "tool_name": "nope",
            "result": None,
            "error": {"error_type": "tool_not_found", "message": "Unknown tool: 'nope'"},
        },
        "reward": None,
        "done": False,
    }
    assert bad_input["observation"]["error"]["error_type"] == "invalid_args"
    assert raised["observation"]["error"] == {
        "error_type": "execution_error",
        "message": "Error calling tool 'boom': RuntimeError: kaboom",
    }
    # The exception failed that step only: the episode goes on and is won.
    assert (right["reward"], right["done"]) == (1.0, True)
    assert right["observation"]["result"]["data"] == "Correct!"
    assert after["observation"]["error"]["error_type"] == "execution_error"
    assert after["done"] is True


def test_an_image_block_is_image_content(live):
    with frames(live, "/openenv/mathlike/ws") as ws:
        picture = ws.step({"type": "call_tool", "tool_name": "picture"})
    [image] = picture["observation"]["result"]["content"]
    assert (image["type"], image["mimeType"]) == ("image", "image/png")
    assert picture["observation"]["result"]["data"] is None
    assert picture["reward"] == 0.5


# Resets.


def test_reset_picks_the_task_from_a_task_spec_or_a_split_and_index(live):
    with frames(live, "/openenv/mathlike/ws") as ws:
        by_spec = ws.ask({"type": "reset", "data": {"task_spec": {"question": "What is 1+1?", "answer": "2"}}})
        by_index = ws.ask({"type": "reset", "data": {"split": "test", "index": 0}})
        won = ws.step({"type": "call_tool", "tool_name": "submit", "arguments": {"answer": "5"}})
    assert by_spec["data"]["observation"] == {"observation": "What is 1+1?", "metadata": {}}
    assert by_index["data"]["observation"]["observation"] == "What is 7-2?"
    assert won["reward"] == 1.0


def test_reset_with_a_seed_replays_the_same_episode(live):
    with frames(live) as first, frames(live) as second:
        a = first.ask({"type": "reset", "data": {"seed": 7}})
        b = second.ask({"type": "reset", "data": {"seed": 7}})
        assert first.state()["episode_id"] != second.state()["episode_id"]
    assert a == b


# Errors: each code, and the socket stays usable with exactly one reply per request.

BAD_FRAMES = [
    ("not json", "INVALID_JSON", "Invalid JSON: Expecting value: line 1 column 1 (char 0)"),
    (b"\xff\xfe", "INVALID_JSON", None),
    ({"type": "wat"}, "UNKNOWN_TYPE", "Unknown message type: wat"),
    ({"data": {}}, "UNKNOWN_TYPE", "Unknown message type: "),
    ({"type": "step"}, "VALIDATION_ERROR", "Invalid message"),
    ({"type": "step", "data": "DOWN"}, "VALIDATION_ERROR", "Invalid message"),
    ({"type": "step", "data": {"type": "call_tool", "foo": 1}}, "VALIDATION_ERROR", "Invalid message"),
    ({"type": "step", "data": {"type": "jump"}}, "VALIDATION_ERROR", "Invalid message"),
    ({"type": "reset", "data": {"seed": -1}}, "VALIDATION_ERROR", "Invalid message"),
    ({"type": "reset", "data": {"seed": "x"}}, "VALIDATION_ERROR", "Invalid message"),
    ({"type": "reset", "data": [1]}, "VALIDATION_ERROR", "Invalid message"),
    ([1, 2], "VALIDATION_ERROR", None),
    ('{"type": "step", "data": {"type": "call_tool", "tool_name": "\\ud800", "arguments": {}}}', "INVALID_JSON", None),
]


@pytest.mark.parametrize(("frame", "code", "message"), BAD_FRAMES)
def test_a_bad_frame_gets_one_error_envelope_and_the_episode_goes_on(live, frame, code, message):
    with frames(live) as ws:
        ws.ask({"type": "reset", "data": {"seed": 42}})
        ws.step(move("DOWN"))
        error = ws.ask(frame)
        assert error["type"] == "error"
        assert error["data"]["code"] == code
        if message is not None:
            assert error["data"]["message"] == message
        if code == "VALIDATION_ERROR" and message is not None:
            assert error["data"]["errors"], "the pydantic errors come along"
        assert position(ws.step(move("DOWN"))) == 8, "the episode continues where it was"
        assert ws.state()["step_count"] == 2


def test_a_validation_error_lists_what_is_wrong_with_the_action(live):
    with frames(live, "/openenv/mathlike/ws") as ws:
        error = ws.ask({"type": "step", "data": {"foo": 1}})
    assert error["data"]["code"] == "VALIDATION_ERROR"
    wrong = {(e["type"], tuple(e["loc"])) for e in error["data"]["errors"]}
    assert wrong == {("missing", ("tool_name",)), ("extra_forbidden", ("foo",))}


def test_a_reset_the_environment_cannot_make_is_an_execution_error_and_keeps_the_episode(live):
    with frames(live, "/openenv/mathlike/ws") as ws:
        ws.ask({"type": "reset", "data": {"task_spec": math_task(tag=new_tag())}})
        error = ws.ask({"type": "reset", "data": {"split": "nope"}})
        assert error["type"] == "error"
        assert error["data"]["code"] == "EXECUTION_ERROR"
        assert "no task for" in error["data"]["message"]
        won = ws.step({"type": "call_tool", "tool_name": "submit", "arguments": {"answer": "4"}})
    assert won["reward"] == 1.0


def test_a_setup_that_raises_is_an_execution_error_for_reset_and_step(live):
    with frames(live, "/openenv/failingsetup/ws") as ws:
        reset = ws.ask({"type": "reset", "data": {}})
        step = ws.ask({"type": "step", "data": {"type": "call_tool", "tool_name": "noop"}})
        assert ws.state()["step_count"] == 0
    for error in (reset, step):
        assert error["type"] == "error"
        assert error["data"]["code"] == "EXECUTION_ERROR"
        assert "setup exploded" in error["data"]["message"]


def test_pipelined_requests_get_exactly_one_reply_each_in_order_and_close_gets_none(live):
    requests: list[Any] = [
        {"type": "reset", "data": {"seed": 42}},
        {"type": "step", "data": move("DOWN")},
        "garbage",
        {"type": "state"},
        {"type": "wat"},
        {"type": "step"},
        {"type": "step", "data": move("DOWN")},
        {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}},
        {"type": "state"},
    ]
    expected = ["observation", "observation", "error", "state", "error", "error", "observation", "mcp", "state"]
    with frames(live) as ws:
        for request in requests:
            ws.send(request)
        ws.send({"type": "close"})
        replies = [ws.recv() for _ in requests]
        assert ws.closed_with() == 1000
    assert [reply["type"] for reply in replies] == expected
    assert replies[-1]["data"]["step_count"] == 2


# JSON-RPC in `mcp` frames: bound to the socket's session.


def test_mcp_frames_call_tools_in_the_sockets_episode_without_reward(live):
    with frames(live) as ws:
        ws.ask({"type": "reset", "data": {"seed": 42}})
        call = {"name": "lake_move", "arguments": {"action": "DOWN"}}
        reply = ws.ask({"type": "mcp", "data": {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call}})
        listed = ws.ask({"type": "mcp", "data": {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}})
        unknown = ws.ask({"type": "mcp", "data": {"jsonrpc": "2.0", "id": 9, "method": "initialize"}})
        assert position(ws.step(move("DOWN"))) == 8
        assert ws.state()["step_count"] == 2
    assert reply["type"] == "mcp"
    assert reply["data"]["id"] == 7
    assert json.loads(reply["data"]["result"]["data"])["position"] == 4
    assert "reward" not in reply["data"]["result"]
    [tool] = listed["data"]["result"]["tools"]
    assert tool["inputSchema"]["required"] == ["action"]
    assert unknown["data"]["error"]["code"] == -32601


# Sessions: the store's, whichever face made them.


def test_closing_ends_the_session_the_socket_opened(live):
    with frames(live) as ws:
        sid = ws.state()["episode_id"]
        assert ping(live, sid) == 200
        ws.send({"type": "close"})
        assert ws.closed_with() == 1000
    wait_until(lambda: sid not in live.store, what="the session to end")
    assert ping(live, sid) in (404, 410)


def test_a_dropped_connection_ends_the_session_too(live):
    with frames(live) as ws:
        sid = ws.state()["episode_id"]
        ws.ws.socket.shutdown(socket.SHUT_RDWR)  # no close frame, no close message: the TCP connection drops
    wait_until(lambda: sid not in live.store, what="the session to end")


def test_a_session_created_over_ors_is_attached_played_and_outlives_the_socket(live):
    tag = new_tag()
    sid = create(live.client, math_task(tag=tag), env_name="mathlike")
    with frames(live, f"/openenv/mathlike/ws?session_id={sid}") as ws:
        assert ws.state() == {"episode_id": sid, "step_count": 0}
        won = ws.step({"type": "call_tool", "tool_name": "submit", "arguments": {"answer": "4"}})
        ws.send({"type": "close"})
        assert ws.closed_with() == 1000
    assert won["reward"] == 1.0
    assert ping(live, sid) == 200, "a socket attached to a session never ends it"
    assert live.client.get("/control/status", headers={"mcp-session-id": sid}).json()["terminated"] is True
    assert live.client.post("/delete", headers={"X-Session-ID": sid}).status_code == 200


def test_a_session_created_over_the_socket_is_pinged_and_deleted_through_ors(live):
    with frames(live) as ws:
        ws.ask({"type": "reset", "data": {"seed": 42}})
        sid = ws.state()["episode_id"]
        assert ping(live, sid) == 200
        assert live.client.post("/delete", headers={"X-Session-ID": sid}).status_code == 200
        # The episode is gone: the server closes the socket, and a client's next call opens a new session.
        assert ws.closed_with() == 1000
    assert ping(live, sid) == 410


def test_attaching_to_an_unknown_session_is_a_session_error_then_a_close(live):
    with frames(live, "/openenv/frozen_lake/ws?session_id=nope") as ws:
        error = ws.recv()
        assert ws.closed_with() == 1000
    assert error == {"type": "error", "data": {"message": "Unknown session_id: nope", "code": "SESSION_ERROR"}}


def test_a_session_takes_one_socket_at_a_time(live):
    sid = rpc(live, "openenv/session/create")["result"]["session_id"]
    path = f"/openenv/frozen_lake/ws?session_id={sid}"
    with frames(live, path) as first:
        assert first.state()["episode_id"] == sid
        with frames(live, path) as second:
            error = second.recv()
            assert second.closed_with() == 1000
        assert first.state()["episode_id"] == sid
    assert error["data"] == {"message": f"Session {sid} already has an attached WebSocket", "code": "SESSION_ERROR"}
    rpc(live, "openenv/session/close", {"session_id": sid})


def test_a_session_of_another_environment_is_refused_on_an_environments_path(live):
    sid = create(live.client, math_task(), env_name="mathlike")
    with frames(live, f"/openenv/frozen_lake/ws?session_id={sid}") as ws:
        error = ws.recv()
    assert error["data"]["code"] == "SESSION_ERROR"
    assert "mathlike" in error["data"]["message"]
    # On the default prefix, a session is served in its own environment.
    with frames(live, f"/openenv/ws?session_id={sid}") as ws:
        assert ws.state()["episode_id"] == sid


def test_the_default_prefix_serves_the_first_environment(live):
    with frames(live, "/openenv/ws") as ws:
        listed = ws.step({"type": "list_tools"})
    assert [tool["name"] for tool in listed["observation"]["tools"]] == ["lake_move"]


def test_a_socket_to_an_unknown_environment_is_refused_with_404(live):
    url = live.url.replace("http://", "ws://") + "/openenv/nope/ws"
    with pytest.raises(InvalidStatus) as refused:
        connect(url, open_timeout=REPLY_TIMEOUT)
    assert refused.value.response.status_code == 404
    assert json.loads(refused.value.response.body) == {"detail": "unknown environment 'nope'"}


def test_a_full_server_sends_capacity_reached_then_closes():
    with openenv_server(max_sessions=1) as live, frames(live) as first:
        first.state()
        with frames(live) as second:
            error = second.recv()
            assert second.closed_with() == 1000
        assert error == {
            "type": "error",
            "data": {
                "message": "server is at its limit of 1 live sessions",
                "code": "CAPACITY_REACHED",
                "active_sessions": 1,
                "max_sessions": 1,
            },
        }
        full = rpc(live, "openenv/session/create")["error"]
        assert full["code"] == -32000 and full["data"] == {"active_sessions": 1, "max_sessions": 1}
        first.send({"type": "close"})
        first.closed_with()
        wait_until(lambda: len(live.store) == 0, what="the slot to free")
        with frames(live) as third:
            assert third.state()["step_count"] == 0


def test_a_frame_larger_than_the_body_limit_closes_the_socket_and_ends_its_session():
    with openenv_server(max_body_bytes=1024) as live, frames(live) as ws:
        sid = ws.state()["episode_id"]
        ws.send({"type": "step", "data": {"action": "x" * 2048}})
        with pytest.raises(ConnectionClosedError) as closed:
            ws.ws.recv(timeout=REPLY_TIMEOUT)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009  # message too big
        wait_until(lambda: sid not in live.store, what="the session to end")


def test_a_connected_socket_keeps_its_session_while_unattached_ones_are_reaped():
    with openenv_server(session_timeout=0.5) as live, frames(live) as ws:
        sid = ws.state()["episode_id"]
        idle = rpc(live, "openenv/session/create")["result"]["session_id"]
        wait_until(lambda: idle not in live.store, what="the reaper to end the idle session")
        assert sid in live.store
        assert ws.state()["episode_id"] == sid


def test_a_peer_that_stops_answering_pings_is_dropped_and_its_session_ends():
    app = create_app(ENVS, Settings(**FAST))
    with serve(app, ws_ping_interval=0.2, ws_ping_timeout=0.2) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=REPLY_TIMEOUT) as raw:
            # A WebSocket handshake by hand, then silence: no pong will ever come back.
            key = "dGhlIHNhbXBsZSBub25jZQ=="
            raw.sendall(
                f"GET /openenv/frozen_lake/ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
            )
            assert raw.recv(4096).startswith(b"HTTP/1.1 101")
            wait_until(lambda: len(app.state.store) == 1, what="the socket's session")
            wait_until(lambda: len(app.state.store) == 0, what="the silent peer to be dropped")


# JSON-RPC over POST /mcp.


def test_jsonrpc_refuses_what_is_not_a_request(live):
    parse = live.client.post("/openenv/frozen_lake/mcp", content=b"{nope")
    empty = live.client.post("/openenv/frozen_lake/mcp", json={})
    initialize = rpc(live, "initialize")
    for response in (parse, empty):
        assert response.status_code == 200
    assert parse.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error", "data": None},
    }
    assert empty.json()["error"]["code"] == -32600
    assert initialize["error"] == {"code": -32601, "message": "Method not found: initialize", "data": None}


def test_jsonrpc_refuses_a_lone_surrogate_as_a_parse_error(live):
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "\\ud800", "arguments": {}}}'
    refused = live.client.post("/openenv/frozen_lake/mcp", content=body)
    assert refused.status_code == 200
    assert refused.json()["error"]["code"] == -32700


def test_a_websocket_from_a_stranger_host_or_origin_is_refused_before_it_opens(live):
    with pytest.raises(InvalidStatus) as refused, frames(live, headers={"Origin": "http://attacker.example"}):
        pass
    assert refused.value.response.status_code == 403
    # The `websockets` client adds a Host of its own to any it is given (two Hosts are a 400): one, by hand.
    stranger = exchange(live.url, websocket_head("/openenv/frozen_lake/ws", [("Host", "attacker.example")]))
    assert stranger.status == 403


def test_jsonrpc_sessions_are_store_sessions_and_tool_calls_are_their_steps(live):
    sid = rpc(live, "openenv/session/create")["result"]["session_id"]
    assert ping(live, sid) == 200
    listed = rpc(live, "tools/list", {"session_id": sid})["result"]["tools"]
    unknown_tool = rpc(live, "tools/call", {"name": "nope", "arguments": {}, "session_id": sid})
    bad_action = rpc(live, "tools/call", {"name": "lake_move", "arguments": {"action": "JUMP"}, "session_id": sid})
    no_name = rpc(live, "tools/call", {"arguments": {}, "session_id": sid})
    # Last: on the session's random map, one move may already end the episode.
    called = rpc(live, "tools/call", {"name": "lake_move", "arguments": {"action": "DOWN"}, "session_id": sid})
    status = live.client.get("/control/status", headers={"mcp-session-id": sid}).json()
    closed = rpc(live, "openenv/session/close", {"session_id": sid})
    again = rpc(live, "tools/call", {"name": "lake_move", "arguments": {"action": "DOWN"}, "session_id": sid})

    assert set(listed[0]) == {
        "name",
        "title",
        "description",
        "inputSchema",
        "outputSchema",
        "icons",
        "annotations",
        "meta",
        "execution",
    }
    result = called["result"]
    assert set(result) == {"content", "structured_content", "meta", "data", "is_error"}
    assert "position" in json.loads(result["data"])
    assert unknown_tool["error"]["code"] == -32603 and unknown_tool["error"]["message"] == "Unknown tool: 'nope'"
    assert bad_action["error"]["code"] == -32602 and "JUMP" in bad_action["error"]["message"]
    assert no_name["error"]["message"] == "Missing 'name' in params"
    assert status["step_count"] == 1
    assert closed["result"] == {"session_id": sid, "closed": True}
    assert again["error"] == {"code": -32602, "message": f"Unknown session_id: {sid}", "data": None}
    assert ping(live, sid) in (404, 410)


def test_a_tool_call_without_a_session_runs_in_a_throwaway_episode(live):
    before = len(live.store)
    called = rpc(live, "tools/call", {"name": "lake_move", "arguments": {"action": "LEFT"}})
    assert called["result"]["is_error"] is False
    assert len(live.store) == before


def test_closing_a_session_with_an_attached_socket_ends_it_when_the_socket_goes(live):
    sid = rpc(live, "openenv/session/create")["result"]["session_id"]
    with frames(live, f"/openenv/frozen_lake/ws?session_id={sid}") as ws:
        closing = rpc(live, "openenv/session/close", {"session_id": sid})
        assert closing["result"] == {"session_id": sid, "closed": False, "closing": True}
        assert ws.state()["episode_id"] == sid
    wait_until(lambda: sid not in live.store, what="the session to end with its socket")


def test_session_close_needs_a_session_id(live):
    assert rpc(live, "openenv/session/close")["error"]["message"] == "Invalid params - 'session_id' is required"


# HTTP: info and the stateless routes.


def test_health_metadata_schema_and_openapi_under_every_prefix(live):
    for prefix in ("/openenv/frozen_lake", "/openenv"):
        assert live.client.get(f"{prefix}/health").json() == {"status": "healthy"}
        meta = live.client.get(f"{prefix}/metadata").json()
        assert meta["name"] == "frozen_lake" and isinstance(meta["description"], str)
        schema = live.client.get(f"{prefix}/schema").json()
        assert {"action", "observation", "state"} <= set(schema)
        assert "the only tool, `lake_move`" in schema["action"]["description"]
        paths = live.client.get(f"{prefix}/openapi.json").json()["paths"]
        assert {"/reset", "/step", "/state", "/mcp", "/health", "/schema", "/metadata"} <= set(paths)
    multi = live.client.get("/openenv/mathlike/schema").json()["action"]
    assert len(multi["anyOf"]) == 2, "no shorthand for an environment of several tools"
    assert live.client.get("/openenv/nope/health").status_code == 404


def test_stateless_reset_and_step_use_a_fresh_episode_each_and_leave_nothing_behind(live):
    before = len(live.store)
    reset = live.client.post("/openenv/frozen_lake/reset", json={"seed": 42})
    step = live.client.post("/openenv/frozen_lake/step", json={"action": {"type": "list_tools"}})
    moved = live.client.post("/openenv/frozen_lake/step", json={"action": {"action": "LEFT"}})
    state = live.client.get("/openenv/frozen_lake/state")
    assert reset.status_code == 200
    assert reset.json()["observation"]["position"] == 0
    assert (reset.json()["reward"], reset.json()["done"], reset.json()["metadata"]) == (0.0, False, None)
    assert step.json()["observation"]["tools"][0]["name"] == "lake_move"
    assert json.loads(moved.json()["observation"]["result"]["data"])["action"] == "LEFT"
    assert state.json() == {"episode_id": None, "step_count": 0}
    assert len(live.store) == before


def test_stateless_routes_refuse_bad_bodies_with_422(live):
    seed = live.client.post("/openenv/frozen_lake/reset", json={"seed": -1})
    action = live.client.post("/openenv/mathlike/step", json={"action": {"foo": 1}})
    no_action = live.client.post("/openenv/mathlike/step", json={})
    assert seed.status_code == 422 and seed.json()["detail"][0]["loc"] == ["body", "seed"]
    assert action.status_code == 422
    assert {(e["type"], tuple(e["loc"])) for e in action.json()["detail"]} == {
        ("missing", ("tool_name",)),
        ("extra_forbidden", ("foo",)),
    }
    assert no_action.status_code == 422


# The API key and the other middleware apply to this face too.


def test_the_api_key_guards_the_socket_and_the_http_routes():
    key = f"key-{uuid.uuid4().hex}"
    with openenv_server(api_key=key) as live:
        url = live.url.replace("http://", "ws://") + "/openenv/frozen_lake/ws"
        with pytest.raises(InvalidStatus) as refused:
            connect(url, open_timeout=REPLY_TIMEOUT)
        assert refused.value.response.status_code == 401
        assert json.loads(refused.value.response.body) == {"detail": "missing or wrong API key"}
        with frames(live, headers={"X-API-Key": key}) as ws:
            assert ws.state()["step_count"] == 0
        with frames(live, headers={"Authorization": f"Bearer {key}"}) as ws:
            assert ws.state()["step_count"] == 0
        unauthorized = live.client.post("/openenv/frozen_lake/mcp", json={})
        assert unauthorized.status_code == 401
        assert unauthorized.json() == {"detail": "missing or wrong API key"}


def test_a_socket_from_a_strangers_browser_origin_is_refused(live):
    url = live.url.replace("http://", "ws://") + "/openenv/frozen_lake/ws"
    with pytest.raises(InvalidStatus) as refused:
        connect(url, open_timeout=REPLY_TIMEOUT, origin="http://evil.example")
    assert refused.value.response.status_code == 403
