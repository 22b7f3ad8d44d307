"""OpenEnv 0.10's own clients (`GenericEnvClient`, `MCPToolClient`) and its `openenv validate` probe, from
their own venv, against `ors-server serve` at `/openenv/<env>` (spec/openenv-face.md).

One script run plays every scenario (the client takes seconds to import); each test asserts on one scenario.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.clients.harness import client_env, run_script, run_server

pytestmark = pytest.mark.clients

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["frozen_lake_async", "frozen_lake_sync", "list_tools", "mistakes", "concurrent", "mcp_tool", "math"]
SEED_42_POSITIONS = [4, 8, 9, 10, 14, 15]
FROZEN_LAKE_SEED_42 = "xFHF/FHFF/FFFH/FHFG"  # the map SFHF/FHFF/FFFH/FHFG, the agent (x) on S


@pytest.fixture(scope="module")
def played(openenv_python, server, tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("openenv-home")
    return run_script(
        openenv_python, "openenv_client.py", server.url, *SCENARIOS, home=home, server=server, timeout=240
    )


def scenario(played: dict, name: str) -> dict:
    result = played[name]
    if isinstance(result.get("error"), str):
        pytest.fail(f"scenario {name} raised in the OpenEnv client:\n{result['error']}")
    return result


def grid_rows(observation: dict) -> str:
    """FrozenLake's grid as `ROW/ROW/...`: plain text, no ANSI escapes."""
    assert "\x1b" not in observation["grid"], observation
    return observation["grid"].replace("\n", "/")


def tool_data(step: dict) -> dict:
    """The JSON observation a FrozenLake move returned, from a `CallToolObservation`'s `result.data`."""
    observation = step["observation"]
    assert observation["tool_name"] == "lake_move"
    assert observation["error"] is None, observation["error"]
    assert observation["result"]["is_error"] is False
    return json.loads(observation["result"]["data"])


def test_generic_client_plays_frozen_lake_seed_42_to_the_goal(played):
    result = scenario(played, "frozen_lake_async")

    assert result["state_before_reset"]["step_count"] == 0
    reset = result["reset"]
    assert (reset["observation"]["position"], reset["done"]) == (0, False)
    assert grid_rows(reset["observation"]) == FROZEN_LAKE_SEED_42
    steps = result["steps"]
    assert [tool_data(step)["position"] for step in steps] == SEED_42_POSITIONS
    assert [step["reward"] for step in steps] == [0.0] * 5 + [1.0]
    assert [step["done"] for step in steps] == [False] * 5 + [True]
    assert result["state"] == {"episode_id": result["state_before_reset"]["episode_id"], "step_count": 6}


def test_a_session_of_the_generic_client_is_a_store_session_that_ends_with_the_client(played):
    result = scenario(played, "frozen_lake_async")

    assert result["ping_during"] == 200, "state().episode_id names the session in ORS"
    assert result["live_sessions_during"] == 1
    assert result["ping_after_close"] in (404, 410)
    assert result["live_sessions_after"] == 0


def test_sync_generic_client_plays_with_the_only_tools_arguments_as_the_action(played):
    result = scenario(played, "frozen_lake_sync")

    assert result["reset"]["observation"]["position"] == 0
    assert [tool_data(step)["position"] for step in result["steps"]] == SEED_42_POSITIONS
    assert (result["steps"][-1]["reward"], result["steps"][-1]["done"]) == (1.0, True)
    assert result["state"]["step_count"] == 6
    # reset starts a new episode in the same session.
    assert result["second_reset"]["observation"]["position"] == 0
    assert result["second_state"] == {"episode_id": result["state"]["episode_id"], "step_count": 0}
    assert result["ping_after_close"] in (404, 410)


def test_list_tools_action_lists_the_tools_with_their_schemas(played):
    result = scenario(played, "list_tools")

    for listed in (result["as_dict"], result["as_action"]):
        assert (listed["reward"], listed["done"]) == (None, False)
        [lake_move] = listed["observation"]["tools"]
        assert lake_move["name"] == "lake_move"
        assert "LEFT, DOWN, RIGHT, UP" in lake_move["description"]
        assert lake_move["input_schema"]["required"] == ["action"]
        assert lake_move["input_schema"]["properties"]["action"]["type"] == "string"
    assert result["state"]["step_count"] == 0, "listing tools is not a step"


def test_bad_actions_get_errors_and_the_episode_goes_on(played):
    result = scenario(played, "mistakes")

    unknown = result["unknown_tool"]["observation"]
    assert unknown["error"] == {"error_type": "tool_not_found", "message": "Unknown tool: 'nope'"}
    assert unknown["result"] is None
    for name in ("bad_action", "bad_arguments"):
        error = result[name]["observation"]["error"]
        assert error["error_type"] == "invalid_args", error
        assert (result[name]["reward"], result[name]["done"]) == (None, False)
    assert "JUMP" in result["bad_action"]["observation"]["error"]["message"]
    for name in ("unknown_type", "not_an_action"):
        error = result[name]["error"]
        assert error["type"] == "RuntimeError"
        assert "(code: VALIDATION_ERROR)" in error["message"]
    assert tool_data(result["first"])["position"] == 4
    assert tool_data(result["then"])["position"] == 8
    assert result["state"]["step_count"] == 2


def test_eight_concurrent_clients_each_play_their_own_episode(played):
    result = scenario(played, "concurrent")

    clients = result["clients"]
    assert len({client["state"]["episode_id"] for client in clients}) == 8
    for client in clients:
        moves = len(client["moves"])
        assert [tool_data(step)["position"] for step in client["steps"]] == SEED_42_POSITIONS[:moves]
        assert client["state"]["step_count"] == moves
        assert client["steps"][-1]["done"] is (moves == 6)
    assert result["live_after"] == 0


def test_mcp_tool_client_connects_lists_calls_and_closes(played):
    result = scenario(played, "mcp_tool")

    assert result["ping_connected"] == 200, "openenv/session/create makes a store session"
    [lake_move] = result["tools"]
    assert lake_move["name"] == "lake_move"
    assert lake_move["input_schema"]["required"] == ["action"]
    assert result["reset"]["observation"]["position"] == 0
    assert json.loads(result["call_down"])["position"] == 4
    assert result["call_bad"]["error"]["type"] == "RuntimeError"
    assert "Tool 'lake_move' failed" in result["call_bad"]["error"]["message"]
    assert "JUMP" in result["call_bad"]["error"]["message"]
    step = result["step_action"]
    assert json.loads(step["observation"]["result"]["data"])["position"] == 8
    assert [tool["name"] for tool in result["step_list"]["observation"]["tools"]] == ["lake_move"]
    # tools/call over JSON-RPC carries no reward, but it is a step of the episode all the same.
    assert result["state"] == {"episode_id": result["session_id"], "step_count": 2}
    assert result["ping_after_close"] in (404, 410)


def test_math_over_the_openenv_face_rewards_the_right_answer(played):
    result = scenario(played, "math")

    assert "6 times 7" in result["reset"]["observation"]["observation"]
    assert (result["right"]["reward"], result["right"]["done"]) == (1.0, True)
    after = result["after_finish"]
    assert after["observation"]["error"]["error_type"] == "execution_error"
    assert "finished" in after["observation"]["error"]["message"]
    assert after["done"] is True
    assert (result["wrong"]["reward"], result["wrong"]["done"]) == (0.0, True)
    assert result["state"]["step_count"] == 1


@pytest.fixture(scope="module")
def keyed(openenv_python, tmp_path_factory) -> dict:
    """One run on a server started with `--api-key`: two scenarios given the key, and both clients without it (that
    scenario passes no key whatever the environment says)."""
    key = {"ORS_TEST_API_KEY": "s3cret-key"}
    with run_server(tmp_path_factory.mktemp("keyed"), "--api-key", "s3cret-key") as server:
        return run_script(
            openenv_python,
            "openenv_client.py",
            server.url,
            "frozen_lake_async",
            "mcp_tool",
            "refused_without_key",
            home=tmp_path_factory.mktemp("keyed-home"),
            server=server,
            env=key,
        )


def test_clients_given_the_servers_api_key_play_unchanged(keyed):
    assert scenario(keyed, "frozen_lake_async")["steps"][-1]["reward"] == 1.0
    assert scenario(keyed, "mcp_tool")["ping_after_close"] in (404, 410)


def test_clients_without_the_key_are_refused(keyed):
    refused = scenario(keyed, "refused_without_key")
    assert refused["generic"]["error"]["type"] == "ConnectionError"
    assert "401" in refused["generic"]["error"]["message"]
    assert refused["mcp_tool"]["error"]["type"] == "HTTPStatusError"
    assert "401" in refused["mcp_tool"]["error"]["message"]


@pytest.mark.parametrize("prefix", ["/openenv/frozen_lake", "/openenv/math", "/openenv"])
def test_openenv_validate_passes(openenv_python, server, tmp_path, prefix):
    cli = openenv_python.parent / "openenv"
    done = subprocess.run(
        [str(cli), "validate", "--url", f"{server.url}{prefix}", "--json"],
        env=client_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n--- server log ---\n{server.log_tail()}"
    report = json.loads(done.stdout)
    assert report["passed"] is True
    assert report["summary"]["passed_count"] == len(report["criteria"]) == 6


def test_the_documented_example_runs_unchanged(openenv_python, server, tmp_path):
    page = (ROOT / "docs" / "openenv.md").read_text()
    section = page.split("## OpenEnv clients", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    script = tmp_path / "example.py"
    script.write_text(code.replace("http://127.0.0.1:8000", server.url))
    done = subprocess.run(
        [str(openenv_python), str(script)],
        env=client_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n--- server log ---\n{server.log_tail()}"
    position, outcome, state, tools, called = done.stdout.splitlines()
    assert (position, outcome, tools) == ("0", "1.0 True", "['lake_move']")
    assert ast.literal_eval(state)["step_count"] == 6
    assert json.loads(called)["position"] == 4
