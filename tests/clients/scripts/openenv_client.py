"""OpenEnv 0.10's own clients against `ors-server serve`: `openenv_client.py ORS_URL SCENARIO...`.

Each scenario drives `ORS_URL/openenv/<env>` with `GenericEnvClient` or `MCPToolClient` exactly as a user
would, records what the client returned (or the exception it raised), and what the server's ORS face says
about the session afterwards. One run plays every scenario asked for: the client takes seconds to import.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import traceback
from typing import Any

from _common import API_KEY, live_sessions, ping_status, report, step_record
from openenv.core import GenericEnvClient, MCPToolClient
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

SEED_42_PATH = ["DOWN", "DOWN", "RIGHT", "RIGHT", "DOWN", "RIGHT"]
HEADERS = {"X-API-Key": API_KEY} if API_KEY else None


def status_once_gone(ors_url: str, sid: str, timeout: float = 10.0) -> int:
    """The `/ping` status for `sid` once the session is gone (404/410), or its last status after `timeout`.

    The client's `close()` returns when the closing handshake is done, which the server's WebSocket layer
    completes before the app has ended the session: so this waits for the end, boundedly.
    """
    deadline = time.monotonic() + timeout
    while (status := ping_status(ors_url, sid)) not in (404, 410) and time.monotonic() < deadline:
        time.sleep(0.05)
    return status


def live_once_settled(ors_url: str, expected: int = 0, timeout: float = 10.0) -> int | None:
    """Live sessions per `/metrics` once they are down to `expected`, or the last count after `timeout`."""
    deadline = time.monotonic() + timeout
    while (count := live_sessions(ors_url)) not in (expected, None) and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


def move(action: str) -> dict:
    return {"type": "call_tool", "tool_name": "lake_move", "arguments": {"action": action}}


def error_record(exc: BaseException) -> dict:
    return {"error": {"type": type(exc).__name__, "message": str(exc)}}


async def frozen_lake_async(ors_url: str) -> dict:
    out: dict[str, Any] = {}
    env = GenericEnvClient(base_url=f"{ors_url}/openenv/frozen_lake", headers=HEADERS)
    async with env:
        out["state_before_reset"] = await env.state()
        out["reset"] = step_record(await env.reset(seed=42))
        out["steps"] = [step_record(await env.step(move(action))) for action in SEED_42_PATH]
        out["state"] = await env.state()
        out["live_sessions_during"] = live_sessions(ors_url)
        out["ping_during"] = ping_status(ors_url, out["state"]["episode_id"])
    out["ping_after_close"] = status_once_gone(ors_url, out["state"]["episode_id"])
    out["live_sessions_after"] = live_once_settled(ors_url)
    return out


def frozen_lake_sync(ors_url: str) -> dict:
    out: dict[str, Any] = {}
    with GenericEnvClient(base_url=f"{ors_url}/openenv/frozen_lake", headers=HEADERS).sync() as env:
        out["reset"] = step_record(env.reset(seed=42))
        # FrozenLake has one tool, so a step without a type is that tool's arguments.
        out["steps"] = [step_record(env.step({"action": action})) for action in SEED_42_PATH]
        out["state"] = env.state()
        # A second episode in the same session: reset starts it afresh.
        out["second_reset"] = step_record(env.reset(seed=42))
        out["second_state"] = env.state()
    out["ping_after_close"] = status_once_gone(ors_url, out["state"]["episode_id"])
    return out


async def list_tools(ors_url: str) -> dict:
    out: dict[str, Any] = {}
    async with GenericEnvClient(base_url=f"{ors_url}/openenv/frozen_lake", headers=HEADERS) as env:
        await env.reset(seed=42)
        out["as_dict"] = step_record(await env.step({"type": "list_tools"}))
        out["as_action"] = step_record(await env.step(ListToolsAction().model_dump()))
        out["state"] = await env.state()
    return out


async def mistakes(ors_url: str) -> dict:
    """Bad actions: each gets an error (an observation or a raised error) and the episode goes on."""
    out: dict[str, Any] = {}
    async with GenericEnvClient(base_url=f"{ors_url}/openenv/frozen_lake", headers=HEADERS) as env:
        await env.reset(seed=42)
        out["first"] = step_record(await env.step(move("DOWN")))
        attempts = {
            "unknown_tool": {"type": "call_tool", "tool_name": "nope", "arguments": {}},
            "bad_action": move("JUMP"),
            "bad_arguments": {"type": "call_tool", "tool_name": "lake_move", "arguments": {"direction": 1}},
            "unknown_type": {"type": "wat"},
            "not_an_action": {"type": "call_tool", "foo": 1},
        }
        for name, action in attempts.items():
            try:
                out[name] = step_record(await env.step(action))
            except Exception as exc:  # the client raises on an error envelope
                out[name] = error_record(exc)
        out["then"] = step_record(await env.step(move("DOWN")))
        out["state"] = await env.state()
    return out


async def concurrent(ors_url: str) -> dict:
    """Eight clients at once, each its own session, each playing its own prefix of the seed-42 path."""

    async def play(index: int) -> dict:
        moves = SEED_42_PATH[: 1 + index % len(SEED_42_PATH)]
        async with GenericEnvClient(base_url=f"{ors_url}/openenv/frozen_lake", headers=HEADERS) as env:
            await env.reset(seed=42)
            steps = [step_record(await env.step(move(action))) for action in moves]
            state = await env.state()
        return {"moves": moves, "steps": steps, "state": state}

    return {
        "clients": list(await asyncio.gather(*(play(i) for i in range(8)))),
        "live_after": live_once_settled(ors_url),
    }


async def mcp_tool(ors_url: str) -> dict:
    out: dict[str, Any] = {}
    client = MCPToolClient(base_url=f"{ors_url}/openenv/frozen_lake", headers=HEADERS)
    await client.connect()
    sid = client._production_session_id  # the id openenv/session/create handed out
    out["session_id"] = sid
    out["ping_connected"] = ping_status(ors_url, sid)
    tools = await client.list_tools()
    out["tools"] = [tool.model_dump(mode="json") for tool in tools]
    out["reset"] = step_record(await client.reset(seed=42))
    out["call_down"] = await client.call_tool("lake_move", action="DOWN")
    try:
        await client.call_tool("lake_move", action="JUMP")
    except Exception as exc:
        out["call_bad"] = error_record(exc)
    out["step_action"] = step_record(
        await client.step(CallToolAction(tool_name="lake_move", arguments={"action": "DOWN"}))
    )
    out["step_list"] = step_record(await client.step(ListToolsAction()))
    out["state"] = (await client.state()).model_dump(mode="json")
    await client.close()
    out["ping_after_close"] = status_once_gone(ors_url, sid)
    return out


async def math(ors_url: str) -> dict:
    out: dict[str, Any] = {}
    task = {"question": "What is 6 times 7?", "answer": "42"}
    async with GenericEnvClient(base_url=f"{ors_url}/openenv/math", headers=HEADERS) as env:
        out["reset"] = step_record(await env.reset(task_spec=task))
        out["right"] = step_record(await env.step({"answer": "42"}))
        out["after_finish"] = step_record(await env.step({"answer": "42"}))
        out["second_reset"] = step_record(await env.reset(task_spec=task))
        out["wrong"] = step_record(
            await env.step({"type": "call_tool", "tool_name": "submit", "arguments": {"answer": "41"}})
        )
        out["state"] = await env.state()
    return out


async def refused_without_key(ors_url: str) -> dict:
    """Both clients without the server's API key: the socket and the JSON-RPC endpoint refuse them."""
    out: dict[str, Any] = {}
    try:
        async with GenericEnvClient(base_url=f"{ors_url}/openenv/frozen_lake") as env:
            out["generic"] = step_record(await env.reset(seed=42))
    except Exception as exc:
        out["generic"] = error_record(exc)
    client = MCPToolClient(base_url=f"{ors_url}/openenv/frozen_lake")
    try:
        await client.connect()
        out["mcp_tool"] = {"connected": True}
    except Exception as exc:
        out["mcp_tool"] = error_record(exc)
    finally:
        await client.close()
    return out


SCENARIOS = {
    "frozen_lake_async": frozen_lake_async,
    "frozen_lake_sync": frozen_lake_sync,
    "list_tools": list_tools,
    "mistakes": mistakes,
    "concurrent": concurrent,
    "mcp_tool": mcp_tool,
    "math": math,
    "refused_without_key": refused_without_key,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ors_url")
    parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    result: dict[str, Any] = {}
    for name in args.scenarios:
        scenario = SCENARIOS[name]
        try:
            if asyncio.iscoroutinefunction(scenario):
                result[name] = asyncio.run(scenario(args.ors_url))
            else:
                result[name] = scenario(args.ors_url)
        except Exception:
            result[name] = {"error": traceback.format_exc()}
    report(result)


if __name__ == "__main__":
    main()
