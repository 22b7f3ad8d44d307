"""The task statement over MCP, read with the `mcp` client: the bound episode's prompt as the MCP prompt `task`, and
as the `instructions` of the `initialize` result when the episode is named at `initialize`."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ors_server import ImageBlock, TextBlock, ToolOutput, tool
from tests.faces.mcp_helpers import Counter, mcp_client, mcp_http_client, server
from tests.ors_envs import SingleTask, SlowSetup, gate

pytestmark = pytest.mark.anyio

PNG = "iVBORw0KGgo="


class Picture(SingleTask):
    name = "picture"

    def get_prompt(self):
        return [TextBlock(text="What is in the picture?"), ImageBlock(data=PNG, mimeType="image/png")]

    @tool
    def answer(self) -> ToolOutput:
        """Answer."""
        return ToolOutput(blocks=[TextBlock(text="ok")], finished=True)


async def test_the_episodes_prompt_is_the_mcp_prompt_task() -> None:
    with server(Counter) as base:
        async with mcp_client(f"{base}/counter/mcp", headers={"X-Session-ID": "prompted"}) as (session, _):
            listed = await session.list_prompts()
            got = await session.get_prompt("task")
    assert [p.name for p in listed.prompts] == ["task"]
    assert [(m.role, m.content.type, m.content.text) for m in got.messages] == [  # type: ignore[union-attr]
        ("user", "text", "count from 0"),
        ("user", "text", "use increment"),
    ]


async def test_images_in_the_prompt_travel_as_mcp_image_content() -> None:
    with server(Picture) as base:
        async with mcp_client(f"{base}/picture/mcp") as (session, _):
            got = await session.get_prompt("task")
    text, image = (m.content for m in got.messages)
    assert text.type == "text" and text.text == "What is in the picture?"  # type: ignore[union-attr]
    assert image.type == "image" and (image.data, image.mime_type) == (PNG, "image/png")  # type: ignore[union-attr]


async def test_an_unknown_prompt_is_an_mcp_error() -> None:
    with server(Counter) as base:
        async with mcp_client(f"{base}/counter/mcp") as (session, _):
            with pytest.raises(MCPError, match="the prompt is 'task'"):
                await session.get_prompt("other")


class _WithExtra(httpx.AsyncBaseTransport):
    """Adds Eval Protocol's `clientInfo._extra` to the `initialize` body, as its mcp 1.x client sends it (the
    mcp 2.x client drops unknown `clientInfo` keys)."""

    def __init__(self, extra: dict[str, Any]) -> None:
        self.extra, self.inner = extra, httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        if isinstance(body, dict) and body.get("method") == "initialize":
            body["params"]["clientInfo"]["_extra"] = self.extra
            content = json.dumps(body).encode()
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            request = httpx.Request(request.method, request.url, headers=headers, content=content)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _initialize(url: str, http: httpx.AsyncClient) -> types.InitializeResult:
    async with http, streamable_http_client(url, http_client=http) as (read, write):
        async with ClientSession(read, write) as session:
            return await session.initialize()


async def test_initialize_carries_the_task_as_instructions_for_an_episode_named_by_x_session_id() -> None:
    with server(Counter) as base:
        http = mcp_http_client(headers={"X-Session-ID": "instructed"})
        result = await _initialize(f"{base}/counter/mcp", http)
    assert result.instructions == "count from 0\nuse increment"


async def test_initialize_carries_the_task_as_instructions_for_an_eval_protocol_binding() -> None:
    with server(Counter) as base:
        http = httpx.AsyncClient(transport=_WithExtra({"session_id": "ep-row", "seed": 4}), follow_redirects=True)
        result = await _initialize(f"{base}/counter/mcp", http)
    assert result.instructions == "count from 40\nuse increment"


async def test_instructions_are_left_out_rather_than_wait_past_ready_wait_for_setup() -> None:
    tag = f"slow-{uuid.uuid4().hex}"
    extra = {"session_id": tag, "config": {"task_spec": {"tag": tag}}}
    try:
        with server(SlowSetup, ready_wait=0.5) as base:
            http = httpx.AsyncClient(transport=_WithExtra(extra), follow_redirects=True)
            result = await _initialize(f"{base}/slowsetup/mcp", http)
            gate(tag).set()
    finally:
        gate(tag).set()
    assert result.instructions is None and result.server_info.name == "ors-server"


async def test_an_episode_bound_to_the_transport_id_has_no_instructions_but_the_prompt_task() -> None:
    with server(Counter) as base:
        async with mcp_client(f"{base}/counter/mcp") as (session, _):
            got = await session.get_prompt("task")
    assert [m.content.text for m in got.messages] == ["count from 0", "use increment"]  # type: ignore[union-attr]
