"""ors-server: serve RL environments for LLM agents as sessions, over ORS, MCP and Eval Protocol's control plane.

What an environment author imports lives here; everything else in the package is internal. Each name is imported
on first use (PEP 562 `__getattr__`), so `from ors_server import Environment, tool` loads neither the web server
(uvicorn, Starlette), the MCP SDK nor Gymnasium: only `Server` brings the server, and `GymEnvironment` Gymnasium
(tests/test_lazy_import.py). Importing any module of the package runs this file first, which is one more reason
it imports nothing itself.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see; at run time `__getattr__` imports each on first use
    from ors_server.compose import HttpServer, StdioServer
    from ors_server.environment import Environment, InvalidTaskSpec, terminal, tool
    from ors_server.gym import GymEnvironment
    from ors_server.http.server import Server
    from ors_server.sandboxes.interface import CommandResult, Sandbox
    from ors_server.types import (
        Blocks,
        GroupCandidate,
        GroupScore,
        ImageBlock,
        Message,
        ReasoningBlock,
        Split,
        TextBlock,
        ToolCallBlock,
        ToolOutput,
        ToolResultBlock,
    )

_HOMES = {
    "Blocks": "ors_server.types",
    "CommandResult": "ors_server.sandboxes.interface",
    "Environment": "ors_server.environment",
    "GroupCandidate": "ors_server.types",
    "GroupScore": "ors_server.types",
    "GymEnvironment": "ors_server.gym",
    "HttpServer": "ors_server.compose.servers",
    "ImageBlock": "ors_server.types",
    "InvalidTaskSpec": "ors_server.environment",
    "Message": "ors_server.types",
    "ReasoningBlock": "ors_server.types",
    "Sandbox": "ors_server.sandboxes.interface",
    "Server": "ors_server.http.server",
    "Split": "ors_server.types",
    "StdioServer": "ors_server.compose.servers",
    "TextBlock": "ors_server.types",
    "ToolCallBlock": "ors_server.types",
    "ToolOutput": "ors_server.types",
    "ToolResultBlock": "ors_server.types",
    "terminal": "ors_server.environment",
    "tool": "ors_server.environment",
}
"""Where each public name is defined."""

__all__ = [
    "Blocks",
    "CommandResult",
    "Environment",
    "GroupCandidate",
    "GroupScore",
    "GymEnvironment",
    "HttpServer",
    "ImageBlock",
    "InvalidTaskSpec",
    "Message",
    "ReasoningBlock",
    "Sandbox",
    "Server",
    "Split",
    "StdioServer",
    "TextBlock",
    "ToolCallBlock",
    "ToolOutput",
    "ToolResultBlock",
    "terminal",
    "tool",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ors_server' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # imported once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
