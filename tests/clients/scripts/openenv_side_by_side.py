"""OpenEnv 0.10's own clients against two servers of the same environment classes:
`openenv_side_by_side.py '{"a": {"guess": URL, "arith": URL}, "b": {...}}'`.

A is OpenEnv's own `create_app`, B is ors-server hosting the same files; both get the same scenarios from
`GenericEnvClient` and `MCPToolClient` (those of the environments given), at the same time, and the result holds
what each client saw on each server (`a`, `b`) for the test to compare. Values that differ by design on any two
runs (random episode ids) are masked.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import traceback
from typing import Any

from _common import report, step_record


class NoWebInterface:
    """OpenEnv's package imports its Gradio web interface when present, which takes most of its import time and
    plays no part in its clients: hidden as the package expects when Gradio is missing (ModuleNotFoundError)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "openenv.core.env_server.web_interface":
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)


sys.meta_path.insert(0, NoWebInterface())  # type: ignore[arg-type]

from openenv.core import GenericEnvClient, MCPToolClient  # noqa: E402
from openenv.core.env_server.mcp_types import CallToolAction  # noqa: E402


def masked(state: Any) -> dict:
    """A state with a random (uuid4) episode id masked: two servers never draw the same one."""
    state = dict(state.model_dump() if hasattr(state, "model_dump") else state)
    if re.fullmatch(r"[0-9a-f-]{36}", str(state.get("episode_id"))):
        state["episode_id"] = "<uuid>"
    return state


def failure(exc: BaseException) -> dict:
    return {"error": type(exc).__name__, "message": str(exc)}


def call_tool(name: str, **arguments: Any) -> dict:
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}


def the_sum(question: str) -> int:
    a, b = re.findall(r"\d+", question)
    return int(a) + int(b)


async def guess(url: str) -> dict:
    out: dict[str, Any] = {}
    async with GenericEnvClient(base_url=url) as env:
        out["reset"] = step_record(await env.reset(seed=3))
        # The target of seed 3 is 8: two misses, the hit, then a step after done (the class answers it).
        out["steps"] = [step_record(await env.step({"guess": guess})) for guess in (10, 5, 8, 12)]
        out["state"] = masked(await env.state())
        try:
            await env.step({"guess": 99})
        except RuntimeError as exc:
            out["invalid"] = failure(exc)
        out["reset_kwargs"] = step_record(await env.reset(seed=1, episode_id="ep-9", target=7, ignored="x"))
        out["hit"] = step_record(await env.step({"guess": 7, "metadata": {"from": "client"}}))
        out["state_after"] = masked(await env.state())
    return out


async def arith(url: str) -> dict:
    out: dict[str, Any] = {}
    async with GenericEnvClient(base_url=url) as env:
        reset = await env.reset(seed=3)
        out["reset"] = step_record(reset)
        answer = the_sum(reset.observation["question"])
        out["list_tools"] = step_record(await env.step({"type": "list_tools"}))
        out["add"] = step_record(await env.step(call_tool("add", a=2, b=3)))
        out["fail"] = step_record(await env.step(call_tool("fail", reason="on purpose")))
        out["bad_args"] = step_record(await env.step(call_tool("add", a="x")))
        out["submit"] = step_record(await env.step(call_tool("submit", answer=answer)))
        out["after_done"] = step_record(await env.step(call_tool("add", a=1, b=1)))
        out["state"] = masked(await env.state())
    async with GenericEnvClient(base_url=url) as env:
        reset = await env.reset(seed=4)
        out["wrong"] = step_record(
            await env.step(call_tool("submit", answer=the_sum(reset.observation["question"]) + 1))
        )
    return out


async def arith_mcp(url: str) -> dict:
    out: dict[str, Any] = {}
    async with MCPToolClient(base_url=url) as env:
        reset = await env.reset(seed=5)
        out["reset"] = step_record(reset)
        out["tools"] = [tool.model_dump(mode="json") for tool in await env.list_tools()]
        out["add"] = await env.call_tool("add", a=20, b=22)
        out["submit"] = await env.call_tool("submit", answer=the_sum(reset.observation.question))
        try:
            await env.call_tool("fail", reason="mcp")
        except RuntimeError as exc:
            out["fail"] = failure(exc)
        out["step"] = step_record(await env.step(CallToolAction(tool_name="add", arguments={"a": 1, "b": 2})))
    return out


SCENARIOS = {"guess": [("guess", guess)], "arith": [("arith", arith), ("arith_mcp", arith_mcp)]}


async def play(urls: dict[str, str]) -> dict:
    out: dict[str, Any] = {}
    for env, url in urls.items():
        for name, scenario in SCENARIOS[env]:
            try:
                out[name] = await scenario(url)
            except Exception:
                out[name] = {"raised": traceback.format_exc()}
    return out


async def main() -> None:
    servers = json.loads(sys.argv[1])
    a, b = await asyncio.gather(play(servers["a"]), play(servers["b"]))
    report({"a": a, "b": b})


if __name__ == "__main__":
    asyncio.run(main())
