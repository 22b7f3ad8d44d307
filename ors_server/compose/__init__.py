"""Composition: an environment's MCP tool servers, whose tools join its own.

    class Calculator(Environment):
        mcp_servers = [StdioServer("calc", [sys.executable, "-m", "ors_server.environments.tool_servers.calc"])]

`servers` holds what an author declares (`StdioServer`, `HttpServer`); `toolbox` one episode's open
connections; `catalogue` the namespaced tools of each class (`<server>__<tool>`), listed once and cached;
`results` the translation of a server's `CallToolResult` into `ToolOutput` blocks. Building an episode opens its
toolbox before `setup()` and tearing it down closes it after `teardown()` (`runtime/instances.py`, run by the
session store); composed tool calls go through the one call pipeline (`calls.py`).
"""

from ors_server.compose.servers import HttpServer, StdioServer, ToolServer

__all__ = ["HttpServer", "StdioServer", "ToolServer"]
