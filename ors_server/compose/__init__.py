"""Composition: an environment's MCP tool servers, whose tools join its own.

    class Calculator(Environment):
        mcp_servers = [StdioServer("calc", [sys.executable, "-m", "ors_server.environments.tool_servers.calc"])]

`servers` holds what an author declares (`StdioServer`, `HttpServer`); `toolbox` one episode's open
connections; `catalogue` the namespaced tools of each class (`<server>__<tool>`), listed once and cached;
`results` the translation of a server's `CallToolResult` into `ToolOutput` blocks. The session store
(`sessions.py`) opens an episode's toolbox before `setup()`, closes it after `teardown()`, and runs composed
tool calls through its one call pipeline.
"""

from ors_server.compose.servers import HttpServer, StdioServer, ToolServer

__all__ = ["HttpServer", "StdioServer", "ToolServer"]
