"""Between ORS and OpenAI chat completions: tools as function schemas, tool calls in, messages out."""

from __future__ import annotations

import json
from typing import Any

from ors_client.types import ToolOutput, blocks_text

NO_ARGUMENTS = {"type": "object", "properties": {}}


def function_tool(spec: dict[str, Any]) -> dict[str, Any]:
    """An ORS tool (`name`, `description`, `input_schema`) as an OpenAI function-calling tool."""
    return {
        "type": "function",
        "function": {
            "name": spec["name"],
            "description": spec.get("description") or "",
            # ORS allows a null schema for a tool without arguments; OpenAI wants an object schema.
            "parameters": spec.get("input_schema") or NO_ARGUMENTS,
        },
    }


def read_tool_call(tool_call: Any) -> tuple[str, str, str]:
    """(id, name, arguments JSON text) of an assistant tool call: a dict, or an OpenAI SDK object."""
    if isinstance(tool_call, dict):
        function = tool_call.get("function") or {}
        return str(tool_call.get("id") or ""), function.get("name") or "", function.get("arguments") or "{}"
    function = tool_call.function
    return str(tool_call.id or ""), function.name or "", function.arguments or "{}"


def parse_arguments(arguments: str | dict[str, Any]) -> dict[str, Any] | str:
    """The arguments as a dict, or the reason they are not one (told to the model, as a tool error)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        return f"the arguments are not valid JSON: {exc}"
    if not isinstance(parsed, dict):
        return "the arguments must be a JSON object"
    return parsed


def user_message(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """The prompt as a user message: plain text when it is all text, else content parts with images inline."""
    if all(b.get("type") == "text" for b in blocks):
        return {"role": "user", "content": blocks_text(blocks)}
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if block.get("type") == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif block.get("type") == "image":
            url = f"data:{block.get('mimeType', 'image/png')};base64,{block.get('data', '')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return {"role": "user", "content": parts}


def assistant_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def tool_message(call_id: str, output: ToolOutput) -> dict[str, Any]:
    """A tool message carries text only (the chat API takes no images there): images appear as a marker."""
    if not output.ok:
        content = f"Error: {output.error}"
    else:
        pieces = []
        for block in output.blocks:
            if block.get("type") == "text":
                pieces.append(block.get("text", ""))
            elif block.get("type") == "image":
                pieces.append(f"[image: {block.get('mimeType', 'image')}]")
        content = "\n".join(pieces)
    return {"role": "tool", "tool_call_id": call_id, "content": content}
