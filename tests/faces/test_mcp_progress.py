"""Progress of long tools over MCP: `Environment.report_progress` becomes `notifications/progress` for a client
that sent a `progressToken`, on a real server, received by the official `mcp` client in both protocol eras."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import httpx
import pytest
from mcp import Client

from ors_server import Environment, TextBlock, ToolOutput, tool
from tests.faces.mcp_helpers import server

pytestmark = pytest.mark.anyio

STEPS = 5
BURST = 40
"""Reports of the burst tool: fewer than a call's feed keeps, so every one must reach the client."""


class Pace:
    """What the client of the paced tool has seen, for the tool to wait on (the server runs in this process)."""

    seen = {done: threading.Event() for done in range(1, STEPS + 1)}


class Long(Environment):
    """Tools that report their progress."""

    name = "long"

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{}]

    def get_prompt(self):
        return [TextBlock(text="run the steps")]

    @tool
    def steps(self) -> ToolOutput:
        """Five steps in a worker thread, each reported; one report that does not grow is dropped."""
        for done in range(1, STEPS + 1):
            self.report_progress(done, STEPS, f"step {done}")
            if done == 3:
                self.report_progress(2, STEPS, "backwards")
        return ToolOutput(blocks=[TextBlock(text="done")], reward=1.0)

    @tool
    def paced(self) -> ToolOutput:
        """A long tool: each step waits until the client has seen its report (bounded). A report sent before the
        client's standalone stream is up is lost (2025 era), so an unseen one is sent again, a little further."""
        for done in range(1, STEPS + 1):
            value, deadline = float(done), time.monotonic() + 10
            self.report_progress(value, STEPS)
            while not Pace.seen[done].wait(0.5) and time.monotonic() < deadline:
                value += 0.01
                self.report_progress(value, STEPS)
        return ToolOutput(blocks=[TextBlock(text="done")], reward=1.0)

    @tool
    def burst(self) -> ToolOutput:
        """Reports in quick succession up to its end, while the face is still sending the first ones."""
        for done in range(1, BURST + 1):
            self.report_progress(done, BURST)
            time.sleep(0.001)
        return ToolOutput(blocks=[TextBlock(text="done")], reward=1.0)

    @tool
    async def async_steps(self) -> ToolOutput:
        """The same from async code, without a total."""
        for done in range(1, STEPS + 1):
            self.report_progress(done * 10)
            await anyio.lowlevel.checkpoint()
        return ToolOutput(blocks=[TextBlock(text="done")], reward=0.5)


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with server(Long) as url:
        yield url


def _episode(base: str) -> str:
    session_id = uuid.uuid4().hex
    created = httpx.post(
        f"{base}/create", json={"env_name": "long", "task_spec": {}}, headers={"X-Session-ID": session_id}, timeout=30
    )
    assert created.status_code == 200, created.text
    return session_id


async def test_a_tool_that_reports_five_steps_gives_the_client_five_progress_notifications(base: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with Client(f"{base}/long/mcp/episodes/{_episode(base)}") as client:
        result = await client.call_tool("steps", {}, progress_callback=on_progress)
    assert result.structured_content == {"reward": 1.0, "finished": False}
    assert seen == [(float(done), float(STEPS), f"step {done}") for done in range(1, STEPS + 1)]


async def test_a_long_tool_reports_to_a_2025_era_client_while_it_runs(base: str) -> None:
    seen: list[float] = []
    for event in Pace.seen.values():
        event.clear()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)
        Pace.seen[int(progress)].set()

    async with Client(f"{base}/long/mcp/episodes/{_episode(base)}", mode="legacy") as client:
        result = await client.call_tool("paced", {}, progress_callback=on_progress)
    assert result.structured_content == {"reward": 1.0, "finished": False}
    assert sorted({int(progress) for progress in seen}) == [1, 2, 3, 4, 5]
    assert seen == sorted(seen)  # each one further than the last


async def test_async_tools_report_too_and_values_only_grow(base: str) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)
        assert total is None and message is None

    async with Client(f"{base}/long/mcp/episodes/{_episode(base)}") as client:
        result = await client.call_tool("async_steps", {}, progress_callback=on_progress)
    assert result.structured_content == {"reward": 0.5, "finished": False}
    assert seen == [10.0, 20.0, 30.0, 40.0, 50.0]


async def test_a_current_era_call_streams_only_when_it_carries_a_progress_token(base: str) -> None:
    session_id = _episode(base)
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "steps",
    }
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}

    def body(extra: dict[str, object]) -> dict[str, object]:
        params = {"name": "steps", "arguments": {}, "_meta": {**meta, **extra}}
        return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}

    async with httpx.AsyncClient(timeout=30) as http:
        url = f"{base}/long/mcp/episodes/{session_id}"
        plain = await http.post(url, json=body({}), headers=headers)
        streamed = await http.post(url, json=body({"progressToken": "tok"}), headers=headers)
    assert plain.headers["content-type"].startswith("application/json"), plain.text
    assert plain.json()["result"]["structuredContent"]["reward"] == 1.0, plain.text
    assert streamed.headers["content-type"].startswith("text/event-stream"), streamed.text
    assert streamed.text.count('"method":"notifications/progress"') == STEPS
    assert '"progressToken":"tok"' in streamed.text and '"id":7' in streamed.text


async def test_a_2025_session_call_with_a_progress_token_is_answered_as_its_own_event_stream(base: str) -> None:
    """Its notifications come on the call's own response, before the result, as the 2025 specification has them;
    the session's other requests stay single JSON answers."""
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    url = f"{base}/long/mcp/episodes/{_episode(base)}"
    async with httpx.AsyncClient(timeout=30) as http:
        opened = await http.post(url, json=hello, headers=headers)
        assert opened.status_code == 200, opened.text
        session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(url, json=initialized, headers=session)).status_code == 202

        def call(request_id: int, meta: dict[str, object]) -> dict[str, object]:
            params = {"name": "steps", "arguments": {}, "_meta": meta}
            return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

        plain = await http.post(url, json=call(2, {}), headers=session)
        streamed = await http.post(url, json=call(3, {"progressToken": "tok"}), headers=session)
    assert plain.headers["content-type"].startswith("application/json"), plain.text
    assert streamed.headers["content-type"].startswith("text/event-stream"), streamed.text
    assert streamed.text.count('"method":"notifications/progress"') == STEPS
    assert streamed.text.index('"progressToken":"tok"') < streamed.text.index('"id":3')
    assert '"structuredContent":{"reward":1.0' in streamed.text.replace(" ", "")


async def test_a_2025_client_gets_every_report_of_a_fast_tool(base: str) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with Client(f"{base}/long/mcp/episodes/{_episode(base)}", mode="legacy") as client:
        result = await client.call_tool("steps", {}, progress_callback=on_progress)
    assert result.structured_content == {"reward": 1.0, "finished": False}
    assert seen == [float(done) for done in range(1, STEPS + 1)]


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_reports_made_just_before_the_end_all_reach_the_client_before_the_result(base: str, mode: str) -> None:
    for _ in range(3):
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)  # noqa: B023 (each call is done before the loop moves on)

        async with Client(f"{base}/long/mcp/episodes/{_episode(base)}", mode=mode) as client:
            result = await client.call_tool("burst", {}, progress_callback=on_progress)
        assert result.structured_content == {"reward": 1.0, "finished": False}
        assert seen == [float(n) for n in range(1, BURST + 1)]


def test_report_progress_outside_a_tool_call_does_nothing() -> None:
    Long().report_progress(1, 2, "nobody listens")
