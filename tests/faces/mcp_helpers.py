"""Test environments and client helpers shared by the MCP, control-plane and cross-plane tests."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel

from ors_server import Environment, ImageBlock, TextBlock, ToolOutput, tool
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.ors_envs import SingleTask
from tests.serving import serve

INIT_PARAMS = {"protocolVersion": "2025-11-25", "capabilities": {}}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


class ByInput(BaseModel):
    by: int = 1


class Counter(Environment):
    """A counter: `increment` adds, `finish` pays 1.0 and ends the episode, `explode` raises."""

    name = "counter"

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{"start": 0}, {"start": 100}]

    @classmethod
    def task_from_seed(cls, seed, config):
        return {"start": (seed or 0) * 10 + int(config.get("offset", 0))}

    def setup(self) -> None:
        self.count = int(self.task_spec.get("start", 0))

    def get_prompt(self):
        return [TextBlock(text=f"count from {self.count}"), TextBlock(text="use increment")]

    @tool
    def increment(self, params: ByInput) -> ToolOutput:
        """Add `by` to the counter."""
        self.count += params.by
        return ToolOutput(blocks=[TextBlock(text=json.dumps({"count": self.count}))], reward=0.5)

    @tool
    def finish(self) -> ToolOutput:
        """End the episode."""
        return ToolOutput(blocks=[TextBlock(text=json.dumps({"count": self.count}))], reward=1.0, finished=True)

    @tool
    def explode(self) -> ToolOutput:
        """Always raises."""
        raise ValueError(f"kaboom at {self.count} with {self.secrets.get('token', '')}")

    @tool
    def picture(self) -> ToolOutput:
        """An image and a caption."""
        return ToolOutput(blocks=[TextBlock(text="a dot"), ImageBlock(data="iVBORw0KGgo=", mimeType="image/png")])


class Gate:
    """A slow tool's switch: the tool reports it started, then blocks until released (boundedly)."""

    started = threading.Event()
    release = threading.Event()


class Sleepy(SingleTask):
    """One slow tool that blocks a worker thread until the test releases it."""

    name = "sleepy"

    def get_prompt(self):
        return [TextBlock(text="wait")]

    @tool
    def wait(self) -> ToolOutput:
        """Block until released."""
        Gate.started.set()
        Gate.release.wait(10)
        return ToolOutput(blocks=[TextBlock(text="{}")], reward=0.25)


@contextlib.contextmanager
def server(*envs: type[Environment], **settings: Any) -> Iterator[str]:
    envs = envs or (Counter,)
    with serve(create_app(list(envs), Settings(**settings))) as url:
        yield url


def mcp_http_client(headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    """The HTTP client the `mcp` 2.x transport takes (it uses httpx2), with its usual timeouts and our headers."""
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))


@contextlib.asynccontextmanager
async def mcp_client(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[tuple[ClientSession, list[str]]]:
    """An `mcp` 2.x `ClientSession` over streamable HTTP; the list fills with the transport id."""
    transport_ids: list[str] = []

    async def grab(response: Any) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and sid not in transport_ids:
            transport_ids.append(sid)

    http = mcp_http_client(headers)
    http.event_hooks["response"].append(grab)
    async with http, streamable_http_client(url, http_client=http) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session, transport_ids


def text(result: Any) -> str:
    return result.content[0].text


async def raw_initialize(
    http: httpx.AsyncClient, url: str, extra: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> httpx.Response:
    """An Eval-Protocol-shaped `initialize` (as mcp 1.x sends it, with `clientInfo._extra`) and `initialized`."""
    client_info: dict[str, Any] = {"name": "reward-kit", "version": "1.0.0"}
    if extra is not None:
        client_info["_extra"] = extra
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {**INIT_PARAMS, "clientInfo": client_info}}
    response = await http.post(url, json=body, headers={**ACCEPT, **(headers or {})})
    sid = response.headers.get("mcp-session-id")
    if response.status_code == 200 and sid:
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        ack = await http.post(url, json=note, headers={**ACCEPT, "mcp-session-id": sid})
        assert ack.status_code == 202
    return response


async def rpc(http: httpx.AsyncClient, url: str, sid: str, method: str, params: dict[str, Any], id: int = 1) -> Any:
    """One JSON-RPC request on an existing transport session; returns the decoded response body."""
    body = {"jsonrpc": "2.0", "id": id, "method": method, "params": params}
    headers = {**ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    response = await http.post(url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


async def call(http: httpx.AsyncClient, url: str, sid: str, name: str, arguments: dict[str, Any] | None = None) -> Any:
    return (await rpc(http, url, sid, "tools/call", {"name": name, "arguments": arguments or {}}))["result"]


LAKE_MOVES = {"LEFT": (0, -1), "DOWN": (1, 0), "RIGHT": (0, 1), "UP": (-1, 0)}


def lake_route(grid: str) -> list[str]:
    """The shortest safe route from `x` to `G` on a FrozenLake grid as the environment shows it (breadth first)."""
    rows = grid.split("\n")
    start = next((r, c) for r, row in enumerate(rows) for c, cell in enumerate(row) if cell == "x")
    routes: dict[tuple[int, int], list[str]] = {start: []}
    frontier = [start]
    while frontier:
        r, c = frontier.pop(0)
        if rows[r][c] == "G":
            return routes[(r, c)]
        for name, (dr, dc) in LAKE_MOVES.items():
            nr, nc = r + dr, c + dc
            if 0 <= nr < len(rows) and 0 <= nc < len(rows[0]) and rows[nr][nc] != "H" and (nr, nc) not in routes:
                routes[(nr, nc)] = [*routes[(r, c)], name]
                frontier.append((nr, nc))
    raise AssertionError(f"no route on {grid!r}")


async def play_lake(client: Any) -> list[dict[str, Any]]:
    """Play a FrozenLake episode to its goal with an `mcp` 2.x `Client`: the route is read from the MCP prompt `task`
    (its initial observation); returns each step's `structuredContent`, checked against the unchanged text."""
    prompt = (await client.get_prompt("task")).messages[0].content.text
    initial = json.loads(prompt.split("Initial observation:\n", 1)[1])
    steps = []
    for action in lake_route(initial["grid"]):
        result = await client.call_tool("lake_move", {"action": action})
        assert not result.is_error, result
        observation = json.loads(result.content[0].text)  # the text Eval Protocol parses, as before
        assert result.structured_content == {
            **observation,
            "reward": result.structured_content["reward"],
            "finished": result.structured_content["finished"],
        }
        steps.append(result.structured_content)
    assert [(s["reward"], s["finished"]) for s in steps] == [(0.0, False)] * (len(steps) - 1) + [(1.0, True)]
    return steps
