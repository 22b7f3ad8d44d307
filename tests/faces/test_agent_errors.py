"""An invalid tool argument is the agent's mistake, on every face: an input error in the face's own shape, the
episode goes on, the step is not counted, and `/metrics` counts it as `input_validation`, never as a crash.

The games' action tools publish their actions as a JSON Schema `enum` and accept them in any case."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from ors_server.environments import BUILTIN_ENVIRONMENTS
from ors_server.environments.blackjack import Blackjack
from ors_server.environments.cliff_walking import CliffWalking
from ors_server.environments.frozen_lake import FrozenLake
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.reliability.reliability_envs import ACCEPT_MCP, mcp_call, mcp_open, ors_call, ors_result
from tests.serving import serve

BAD_ARGUMENTS = {
    "outside-the-enum": {"action": "JUMP"},
    "outside-the-enum-lower-case": {"action": "jump"},
    "wrong-type": {"action": 3},
    "missing-field": {},
    "unknown-field-only": {"direction": "LEFT"},
}
ACTIONS = ["LEFT", "DOWN", "RIGHT", "UP"]


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with serve(create_app(BUILTIN_ENVIRONMENTS, Settings())) as url, httpx.Client(base_url=url, timeout=15) as http:
        yield http


def tool_calls(client: httpx.Client, outcome: str) -> float:
    """`ors_tool_calls_total{env="frozen_lake",tool="lake_move",outcome=...}` now."""
    wanted = f'ors_tool_calls_total{{env="frozen_lake",outcome="{outcome}",tool="lake_move"}}'
    for line in client.get("/metrics").text.splitlines():
        name, _, value = line.rpartition(" ")
        labels = name[name.index("{") + 1 : -1].split(",") if "{" in name else []
        if name.startswith("ors_tool_calls_total{") and f"ors_tool_calls_total{{{','.join(sorted(labels))}}}" == wanted:
            return float(value)
    return 0.0


def step_count(client: httpx.Client, key: str) -> int:
    status = client.get("/frozen_lake/control/status", headers={"mcp-session-id": key})
    assert status.status_code == 200, status.text
    return status.json()["step_count"]


@pytest.fixture
def counted(client: httpx.Client) -> Iterator[None]:
    """Asserts that the test's bad calls were counted as input errors and none as a crash."""
    before = tool_calls(client, "input_validation"), tool_calls(client, "crashed")
    yield
    after = tool_calls(client, "input_validation"), tool_calls(client, "crashed")
    assert after[0] - before[0] == 1, "the bad call is counted as input_validation"
    assert after[1] == before[1], "nothing crashed"


@pytest.mark.parametrize("arguments", BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_ors_answers_an_invalid_argument_as_input_validation_and_the_episode_goes_on(
    client: httpx.Client, counted: None, arguments: dict[str, Any]
) -> None:
    sid = f"agent-{uuid.uuid4().hex}"
    body = {"env_name": "frozen_lake", "task_spec": {"seed": 42}}
    assert client.post("/create", json=body, headers={"X-Session-ID": sid}).status_code == 200
    events = ors_call(client, sid, "lake_move", arguments, "frozen_lake")
    # An `end` event with a RunToolError: never the `error` event, which the openreward client takes for a crashed
    # tool and so for a dead session.
    assert [name for name, _ in events] == ["task_id", "end"]
    result = ors_result(events)
    assert (result["ok"], result["reason"]) == (False, "input_validation"), result
    assert result["error"].startswith("Tool input validation error")
    if arguments.get("action") in ("JUMP", "jump"):
        assert f"Invalid action 'JUMP'. Valid actions: {ACTIONS}" in result["error"]
    assert step_count(client, sid) == 0, "the tool did not run: no step"
    moved = ors_result(ors_call(client, sid, "lake_move", {"action": "down"}, "frozen_lake"))
    assert moved["ok"] and json.loads(moved["output"]["blocks"][0]["text"])["position"] == 4
    assert step_count(client, sid) == 1
    client.post("/delete", headers={"X-Session-ID": sid})


@pytest.mark.parametrize("arguments", BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_mcp_answers_an_invalid_argument_as_is_error_and_the_episode_goes_on(
    client: httpx.Client, counted: None, arguments: dict[str, Any]
) -> None:
    key = uuid.uuid4().hex
    transport = mcp_open(client, "/frozen_lake/mcp/", {"session_id": key, "seed": 42})
    result = mcp_call(client, "/frozen_lake/mcp/", transport, "lake_move", arguments)
    assert result["isError"] is True
    [content] = result["content"]
    assert content["text"].startswith("Tool input validation error")
    assert step_count(client, key) == 0
    moved = mcp_call(client, "/frozen_lake/mcp/", transport, "lake_move", {"action": "DOWN"})
    assert not moved["isError"] and json.loads(moved["content"][0]["text"])["position"] == 4
    assert step_count(client, key) == 1
    client.delete("/frozen_lake/mcp/", headers={**ACCEPT_MCP, "mcp-session-id": transport})


@pytest.mark.parametrize("arguments", BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_openenv_answers_an_invalid_argument_with_an_invalid_args_observation_and_the_episode_goes_on(
    client: httpx.Client, counted: None, arguments: dict[str, Any]
) -> None:
    url = str(client.base_url).replace("http://", "ws://") + "/openenv/frozen_lake/ws"
    with connect(url, open_timeout=10) as ws:

        def ask(frame: dict[str, Any]) -> dict[str, Any]:
            ws.send(json.dumps(frame))
            return json.loads(ws.recv(timeout=10))

        ask({"type": "reset", "data": {"seed": 42}})
        bad = ask({"type": "step", "data": {"type": "call_tool", "tool_name": "lake_move", "arguments": arguments}})
        assert bad["type"] == "observation", bad
        assert bad["data"]["observation"]["error"]["error_type"] == "invalid_args"
        assert (bad["data"]["reward"], bad["data"]["done"]) == (None, False)
        assert ask({"type": "state"})["data"]["step_count"] == 0
        moved = ask({"type": "step", "data": {"action": "down"}})
        assert json.loads(moved["data"]["observation"]["result"]["data"])["position"] == 4
        assert ask({"type": "state"})["data"]["step_count"] == 1


def test_openenv_json_rpc_answers_an_invalid_argument_as_invalid_params(client: httpx.Client, counted: None) -> None:
    def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return client.post("/openenv/frozen_lake/mcp", json=body).json()

    sid = rpc("openenv/session/create", {})["result"]["session_id"]
    bad = rpc("tools/call", {"name": "lake_move", "arguments": {"action": "JUMP"}, "session_id": sid})
    assert bad["error"]["code"] == -32602 and "Invalid action 'JUMP'" in bad["error"]["message"]
    assert step_count(client, sid) == 0
    assert "result" in rpc("tools/call", {"name": "lake_move", "arguments": {"action": "down"}, "session_id": sid})
    assert step_count(client, sid) == 1
    rpc("openenv/session/close", {"session_id": sid})


@pytest.mark.parametrize(
    ("env_cls", "actions"),
    [(FrozenLake, ACTIONS), (CliffWalking, ["UP", "RIGHT", "DOWN", "LEFT"]), (Blackjack, ["STICK", "HIT"])],
    ids=["frozen_lake", "cliff_walking", "blackjack"],
)
def test_every_face_publishes_the_games_actions_as_an_enum(client: httpx.Client, env_cls: Any, actions: list) -> None:
    [tool] = env_cls.tools.values()
    [ors_tool] = client.get(f"/{env_cls.name}/tools").json()["tools"]
    transport = mcp_open(client, f"/{env_cls.name}/mcp/")
    listed = client.post(
        f"/{env_cls.name}/mcp/",
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        headers={**ACCEPT_MCP, "mcp-session-id": transport},
    ).json()["result"]["tools"]
    client.delete(f"/{env_cls.name}/mcp/", headers={**ACCEPT_MCP, "mcp-session-id": transport})
    openenv_schema = client.get(f"/openenv/{env_cls.name}/schema").json()["action"]

    schemas = [ors_tool["input_schema"], listed[0]["inputSchema"], openenv_schema["anyOf"][-1]]
    for schema in schemas:
        assert schema["properties"]["action"]["type"] == "string"
        assert schema["properties"]["action"]["enum"] == actions, schema
        assert schema["required"] == ["action"]
    assert tool.name == ors_tool["name"] == listed[0]["name"]
