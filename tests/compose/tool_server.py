"""The MCP tool server the composition tests start: over stdio (`python -m tests.compose.tool_server TAG`, the tag
marks its process for the tests to find) and over streamable HTTP (`http_app()`)."""

from __future__ import annotations

import base64
import ctypes
import os
import sys
import uuid

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def make_server() -> MCPServer:
    server = MCPServer("testtools", log_level="ERROR")
    notes: list[str] = []

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool()
    def pid() -> str:
        """This server process's name (`NAME`): a sandboxed server's own pid says nothing outside its namespace,
        and its name is how the tests find its process (`tests.compose.envs.pid_of`)."""
        return NAME

    @server.tool()
    def read(path: str) -> str:
        """The file's first bytes, or the error that reading it raised."""
        try:
            with open(path, "rb") as file:
                return "read: " + file.read(4096).decode("utf-8", "replace")
        except OSError as exc:
            return f"refused: {type(exc).__name__}"

    @server.tool()
    def remember(note: str) -> str:
        """Keep a note in this server process."""
        notes.append(note)
        return str(len(notes))

    @server.tool()
    def recall() -> str:
        """Every note kept, joined by '|'."""
        return "|".join(notes)

    @server.tool()
    async def hang() -> str:
        """Never answers."""
        await anyio.sleep(3600)
        return "never"

    @server.tool()
    def spin() -> str:
        """Computes forever (a runaway calculation: sync code, so the server answers nothing meanwhile)."""
        while True:
            pass

    @server.tool()
    def shout(lines: int) -> str:
        """Writes `lines` lines of 100 bytes to stderr."""
        for _ in range(lines):
            sys.stderr.write("x" * 99 + "\n")
        sys.stderr.flush()
        return "shouted"

    @server.tool()
    def crash() -> str:
        """Ends this server's process."""
        os._exit(3)

    @server.tool()
    def fail() -> str:
        """Fails with a message."""
        raise ToolError("no luck today")

    @server.tool()
    def picture() -> Image:
        """A one-pixel PNG."""
        return Image(data=PNG, format="png")

    return server


def http_app():  # type: ignore[no-untyped-def]
    return make_server().streamable_http_app(json_response=True)


NAME = uuid.uuid4().hex[:15]
"""The process's name (`/proc/<pid>/comm`, 15 characters at most), set when it runs as a server."""

if __name__ == "__main__":
    ctypes.CDLL(None).prctl(15, NAME.encode(), 0, 0, 0)  # PR_SET_NAME
    make_server().run()
