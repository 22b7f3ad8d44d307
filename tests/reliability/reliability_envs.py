"""Environments that misbehave on purpose, plus the wire helpers the reliability tests share.

Everything an environment does is written to the journal of `tests.ors_envs`, keyed by the `tag` in its task
spec, so a test can count setups and teardowns from outside the server. Hanging code waits on a gate of that module
with a bound (`HANG_BOUND`), so a broken test cannot keep a worker thread forever; its `release_all()` opens every
gate.

This module is also imported by `ors-server serve --env tests.reliability.reliability_envs:Journaled` in a
subprocess (the SIGTERM test puts the repository root on PYTHONPATH): `Journaled` appends one line per
teardown to the file named by the `ORS_TEARDOWN_LOG` environment variable.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import httpx
from pydantic import BaseModel

from ors_server import Environment, Split, TextBlock, ToolOutput, tool
from tests.ors_envs import gate, record

HANG_BOUND = 20.0
"""The longest any hanging environment code blocks a worker thread."""


class NoteInput(BaseModel):
    text: str


class Faulty(Environment):
    """Behaves as its task spec says: `setup` and `teardown` may be "ok", "raise" or "hang" (sync or async)."""

    name = "faulty"

    @classmethod
    def list_splits(cls) -> list[str | Split]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{"setup": "ok", "teardown": "ok"}]

    def __init__(self, task_spec: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets)
        self.tag = str(self.task_spec.get("tag", ""))
        record(self.tag, "init")

    def _behave(self, phase: str) -> None:
        mode = self.task_spec.get(phase, "ok")
        record(self.tag, f"{phase}-start")
        if mode == "raise":
            raise RuntimeError(f"{phase} exploded with {self.secrets.get('TOKEN', 'no token')}")
        if mode == "hang":
            gate(self.tag).wait(HANG_BOUND)
        record(self.tag, f"{phase}-end")

    def setup(self) -> None:
        self._behave("setup")

    def teardown(self) -> None:
        self._behave("teardown")

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="misbehave")]

    @tool
    def note(self, params: NoteInput) -> ToolOutput:
        """Echo the text; pays 0.5."""
        record(self.tag, "note")
        return ToolOutput(blocks=[TextBlock(text=json.dumps({"note": params.text}))], reward=0.5)

    @tool
    def boom(self) -> ToolOutput:
        """Raise."""
        record(self.tag, "boom")
        raise RuntimeError("tool exploded")

    @tool
    def hang(self) -> ToolOutput:
        """Block a worker thread until released (or HANG_BOUND)."""
        record(self.tag, "hang")
        gate(self.tag).wait(HANG_BOUND)
        return ToolOutput(blocks=[TextBlock(text="{}")])

    @tool
    async def hang_async(self) -> ToolOutput:
        """Sleep on the event loop far longer than any test."""
        record(self.tag, "hang_async")
        await anyio.sleep(3600)
        return ToolOutput(blocks=[TextBlock(text="{}")])

    @tool
    def finish(self) -> ToolOutput:
        """End the episode with reward 1."""
        return ToolOutput(blocks=[TextBlock(text="{}")], reward=1.0, finished=True)


class Journaled(Environment):
    """Appends `teardown <tag>` to the file named by ORS_TEARDOWN_LOG when torn down; `nap` sleeps a second."""

    name = "journaled"

    @classmethod
    def list_splits(cls) -> list[str | Split]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{"tag": "listed"}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="nap, then leave")]

    def _log(self, what: str) -> None:
        with open(os.environ["ORS_TEARDOWN_LOG"], "a", encoding="utf-8") as log:
            log.write(f"{what} {self.task_spec.get('tag', '-')}\n")

    def teardown(self) -> None:
        self._log("teardown")

    @tool
    async def nap(self) -> ToolOutput:
        """Sleep for a second, then answer (the end is journaled too)."""
        await anyio.sleep(1.0)
        self._log("nap-end")
        return ToolOutput(blocks=[TextBlock(text="rested")], reward=1.0)


# Wire helpers.

ACCEPT_MCP = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def initialize_body(extra: dict[str, Any] | None = None, request_id: int = 0) -> dict[str, Any]:
    """An `initialize` as Eval Protocol sends it (mcp 1.x, `clientInfo._extra`)."""
    client_info: dict[str, Any] = {"name": "reward-kit", "version": "1.0.0"}
    if extra is not None:
        client_info["_extra"] = extra
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info}
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


def mcp_open(client: httpx.Client, url: str, extra: dict[str, Any] | None = None) -> str:
    """Initialize an MCP transport (and send `initialized`); returns its `mcp-session-id`."""
    response = client.post(url, json=initialize_body(extra), headers=ACCEPT_MCP)
    assert response.status_code == 200, response.text
    transport = response.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    ack = client.post(url, json=note, headers={**ACCEPT_MCP, "mcp-session-id": transport})
    assert ack.status_code == 202, ack.text
    return transport


def mcp_call(client: httpx.Client, url: str, transport: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """`tools/call` over an open transport; returns the JSON-RPC `result`."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    response = client.post(url, json=body, headers={**ACCEPT_MCP, "mcp-session-id": transport})
    assert response.status_code == 200, response.text
    return response.json()["result"]


def sse_events(raw: bytes) -> list[tuple[str, str]]:
    """(event, data) pairs of an SSE body; comments dropped."""
    events = []
    for block in raw.decode("utf-8").split("\r\n\r\n"):
        name, data = None, []
        for line in block.split("\r\n"):
            field, _, value = line.partition(":")
            if field == "event":
                name = value.removeprefix(" ")
            elif field == "data":
                data.append(value.removeprefix(" "))
        if name is not None:
            events.append((name, "\n".join(data)))
    return events


def ors_call(client: httpx.Client, sid: str, name: str, arguments: Any, env: str) -> list[tuple[str, str]]:
    """POST `/{env}/call` and return its SSE events; asserts a 200 stream."""
    body = {"name": name, "input": arguments}
    headers = {"X-Session-ID": sid, "Accept": "text/event-stream"}
    with client.stream("POST", f"/{env}/call", json=body, headers=headers) as response:
        raw = response.read()
    assert response.status_code == 200, raw
    return sse_events(raw)


def ors_result(events: list[tuple[str, str]]) -> dict[str, Any]:
    """The joined `chunk`/`end` JSON of a call's events (as the `openreward` client rebuilds it)."""
    names = [name for name, _ in events]
    assert names[0] == "task_id" and names[-1] == "end", events
    return json.loads("".join(data.lstrip() for name, data in events if name in ("chunk", "end")))
