"""The built-in `calculator`: its task needs the tools of its composed `calc` server (an MCP server over stdio
shipped in the `environments` package), called over ORS and MCP like the environment's own."""

from __future__ import annotations

import re

import pytest

from ors_server.environments.calculator import Calculator
from tests.faces.mcp_helpers import mcp_client
from tests.ors_envs import call_result, live_server, parse_sse, post_sse, sid_header

pytestmark = pytest.mark.anyio


def test_the_tasks_are_fixed_and_answerable() -> None:
    tasks = Calculator.list_tasks("test")
    assert len(tasks) == 20 and tasks == Calculator.list_tasks("test")
    assert tasks[0]["question"].startswith("What is ") and "prime factor" in tasks[1]["question"]


def test_an_episode_solved_with_the_calc_tools_over_ors_earns_the_reward() -> None:
    task = Calculator.get_task("test", 0)
    with live_server([Calculator], ready_wait=20.0) as live:
        body = {"env_name": "calculator", "task_spec": task}
        assert live.client.post("/create", json=body, headers=sid_header("c1")).status_code == 200
        prompt = live.client.get("/prompt", headers=sid_header("c1")).json()[0]["text"]
        expression = re.search(r"What is (.+)\?", prompt).group(1)  # type: ignore[union-attr]

        def call(name: str, arguments: dict[str, object]) -> dict[str, object]:
            body = {"name": name, "input": arguments}
            response, raw = post_sse(live.client, "/calculator/call", body, "c1")
            assert response.status_code == 200, raw
            return call_result(parse_sse(raw))

        evaluated = call("calc__evaluate", {"expression": expression})
        value = evaluated["output"]["blocks"][0]["text"]  # type: ignore[index]
        submitted = call("submit", {"answer": int(value)})
    assert int(value) == task["answer"]
    assert submitted["output"]["reward"] == 1.0 and submitted["output"]["finished"] is True  # type: ignore[index]


async def test_the_calc_tools_solve_a_task_over_mcp() -> None:
    with live_server([Calculator], ready_wait=20.0) as live:
        # A session named by X-Session-ID gets the task of seed None: task 0 of the train split.
        async with mcp_client(f"{live.url}/calculator/mcp", headers={"X-Session-ID": "m1"}) as (session, _):
            names = [t.name for t in (await session.list_tools()).tools]
            prompt = (await session.get_prompt("task")).messages[0].content.text  # type: ignore[union-attr]
            expression = re.search(r"What is (.+)\?", prompt).group(1)  # type: ignore[union-attr]
            value = await session.call_tool("calc__evaluate", {"expression": expression})
            result = await session.call_tool("submit", {"answer": int(value.content[0].text)})  # type: ignore[union-attr]
            factors = await session.call_tool("calc__factorize", {"n": 360})
    assert names == ["submit", "calc__evaluate", "calc__factorize"]
    assert result.content[0].text == "Correct!"  # type: ignore[union-attr]
    assert factors.is_error  # the episode has finished: no further calls, composed or not
