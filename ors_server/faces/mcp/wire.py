"""What the MCP face's answers look like: tool lists, call results (the observation as content, the reward in
`structuredContent`), the task as a prompt and a resource, and the face's one error shape (a JSON-RPC error)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp import types
from starlette.responses import JSONResponse, Response

from ors_server.calls import ToolCrashed, ToolRejected
from ors_server.environment import ToolDef
from ors_server.errors import (
    BadRequest,
    OrsError,
    SessionDeleted,
    Unavailable,
)
from ors_server.faces import wirejson
from ors_server.types import ImageBlock, TextBlock, ToolOutput

SESSION_HEADER = "mcp-session-id"
STREAMED_SCOPE_KEY = "ors.streamed"
"""ASGI scope key of a request that asked for progress and is answered as an event stream."""
EPISODE_SCOPE_KEY = "ors.episode"
"""ASGI scope key of an `initialize` request whose episode was named before the SDK answers it."""
KEY_HEADER = "x-session-id"
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reward": {"type": ["number", "null"], "description": "The reward of this step (null: none given)."},
        "finished": {"type": "boolean", "description": "Whether the episode has ended."},
    },
    "required": ["reward", "finished"],
    "description": "The step's reward and the end of the episode; the fields of a JSON object observation too.",
}
"""Every tool's `outputSchema`: `structuredContent` carries the reward where MCP clients look for it."""

# JSON-RPC codes for refusals made before the SDK sees a request.
INVALID_REQUEST = types.INVALID_REQUEST
INVALID_PARAMS = types.INVALID_PARAMS
SERVER_UNAVAILABLE = -32000


def rpc_error(exc: OrsError, request_id: Any = None) -> JSONResponse:
    """The MCP face's one error shape: a JSON-RPC error object, with the HTTP status and headers of `exc`."""
    if isinstance(exc, Unavailable):
        code = SERVER_UNAVAILABLE
    elif isinstance(exc, BadRequest):
        code = INVALID_PARAMS
    elif exc.status < 500:
        code = INVALID_REQUEST
    else:
        code = types.INTERNAL_ERROR
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": exc.message}}
    # An MCP client knows no 410: a deleted session is one it cannot find.
    status = 404 if isinstance(exc, SessionDeleted) else exc.status
    return JSONResponse(body, status, headers=exc.headers)


def render_error(exc: OrsError) -> Response:
    return rpc_error(exc)


def tool_list(tools: Sequence[ToolDef]) -> list[types.Tool]:
    """The tool list of a session or an environment: the same specs as ORS `/task_tools` and `/tools`."""
    return [
        types.Tool(
            name=t.name, description=t.description, input_schema=t.schema or EMPTY_SCHEMA, output_schema=OUTPUT_SCHEMA
        )
        for t in tools
    ]


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def structured(result: ToolOutput) -> dict[str, Any]:
    """`structuredContent`: the fields of the observation when its one text block is a JSON object, then `reward`
    and `finished` (which win over fields of the same name)."""
    texts = [block.text for block in result.blocks if isinstance(block, TextBlock)]
    fields: dict[str, Any] = {}
    if len(texts) == 1 and texts[0].lstrip().startswith("{"):
        try:
            parsed = wirejson.loads(texts[0].encode())
        except wirejson.MalformedJson:
            parsed = None
        fields = parsed if isinstance(parsed, dict) else {}
    return {**fields, "reward": result.reward, "finished": result.finished}


def render(name: str, result: ToolOutput | ToolRejected | ToolCrashed) -> types.CallToolResult:
    """A call result as MCP content: the observation as text and image content, unchanged (Eval Protocol's clients
    parse the text), and the reward and the end of the episode in `structuredContent`."""
    if isinstance(result, ToolRejected):
        return error_result(result.message)
    if isinstance(result, ToolCrashed):
        return error_result(f"Error executing tool {name}: {result.message}")
    content: list[types.ContentBlock] = []
    for block in result.blocks:
        if isinstance(block, TextBlock):
            content.append(types.TextContent(type="text", text=block.text))
        elif isinstance(block, ImageBlock):
            content.append(types.ImageContent(type="image", data=block.data, mime_type=block.mimeType))
    return types.CallToolResult(content=content, structured_content=structured(result), is_error=False)


TASK_PROMPT = types.Prompt(name="task", description="The task statement of this MCP session's episode.")
TASK_RESOURCE = types.Resource(
    uri="ors://task",
    name="task",
    description="The task statement of the episode, as the prompt 'task' gives it (text, and images as blobs).",
    mime_type="text/plain",
)
"""The task as a resource: its statement, never the task spec (which may hold the answer a reward checks)."""


def content_block(block: TextBlock | ImageBlock) -> types.TextContent | types.ImageContent:
    if isinstance(block, ImageBlock):
        return types.ImageContent(type="image", data=block.data, mime_type=block.mimeType)
    return types.TextContent(type="text", text=block.text)
