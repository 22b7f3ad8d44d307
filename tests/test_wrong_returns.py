"""An episode's method that returns the wrong type is named as the author's bug in each face's error, with the
method and the type due: a prompt that is not blocks (also where the control plane and OpenEnv read it as the first
observation), a tool result that is not a ToolOutput. (The class-level listings are checked at startup:
tests/test_authoring_errors.py.)"""

from __future__ import annotations

import re

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from ors_server import Environment, ToolOutput, tool
from tests.faces.mcp_helpers import mcp_client, raw_initialize, server
from tests.ors_envs import call, create

PROMPT_BUG = (
    "Careless.get_prompt() returned str 'Guess my number.'; it must return a list of TextBlock or ImageBlock, "
    "such as [TextBlock(text=...)]"
)
TOOL_BUG = "Careless.guess() returned dict {'blocks': []}; it must return a ToolOutput"

pytestmark = pytest.mark.anyio


class Careless(Environment):
    """Returns a string for a prompt and a dict for a tool result."""

    name = "careless"

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{"secret": 3}]

    def get_prompt(self):
        return "Guess my number."

    @tool
    def guess(self) -> ToolOutput:
        """Guess."""
        return {"blocks": []}  # type: ignore[return-value]


def test_a_prompt_that_is_not_blocks_is_a_500_naming_the_method_and_the_type_on_every_face() -> None:
    with server(Careless) as base, httpx.Client(base_url=base, timeout=30) as client:
        sid = create(client, {"secret": 3}, env_name="careless")
        ors = client.get("/careless/prompt", headers={"X-Session-ID": sid})
        control = client.get("/control/initial_state", headers={"mcp-session-id": "row-1"})
        openenv = client.post("/openenv/careless/reset", json={})
    assert (ors.status_code, ors.json()) == (500, {"detail": PROMPT_BUG})
    assert (control.status_code, control.json()) == (500, {"error": PROMPT_BUG})
    assert (openenv.status_code, openenv.json()["detail"]) == (500, PROMPT_BUG)


async def test_mcp_answers_a_prompt_that_is_not_blocks_with_an_error_naming_the_method() -> None:
    with server(Careless) as base:
        async with mcp_client(f"{base}/mcp") as (session, _):
            with pytest.raises(MCPError, match=re.escape(PROMPT_BUG)):
                await session.get_prompt("task")


async def test_a_tool_result_that_is_not_a_tool_output_names_the_tool_and_the_type_on_ors_and_mcp() -> None:
    with server(Careless) as base:
        with httpx.Client(base_url=base, timeout=30) as client:
            sid = create(client, {"secret": 3}, env_name="careless")
            events = call(client, sid, "guess", path="/careless/call")
        async with mcp_client(f"{base}/mcp") as (session, _):
            result = await session.call_tool("guess", {})
        async with httpx.AsyncClient(timeout=30) as http:
            handshake = await raw_initialize(http, f"{base}/mcp", {"session_id": "row-2"})
    assert (events[-1].name, events[-1].data) == ("error", TOOL_BUG)
    assert result.is_error and result.content[0].text.endswith(TOOL_BUG)  # type: ignore[union-attr]
    assert handshake.status_code == 200 and "instructions" not in handshake.json()["result"]
