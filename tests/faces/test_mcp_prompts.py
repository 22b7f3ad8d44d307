"""The task statement over MCP: the bound episode's prompt as the MCP prompt `task`, read with the `mcp` client."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from ors_server import Environment, ImageBlock, TextBlock, ToolOutput, tool
from tests.faces.mcp_helpers import Counter, mcp_client, server

pytestmark = pytest.mark.anyio

PNG = "iVBORw0KGgo="


class Picture(Environment):
    name = "picture"

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{}]

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
