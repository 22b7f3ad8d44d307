"""Environments that compose the test tool server, made per test (a tag marks their server processes), and
helpers to find those processes."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from ors_server import Environment, HttpServer, StdioServer, TextBlock, ToolOutput, tool


def new_tag() -> str:
    return f"compose-{uuid.uuid4().hex[:12]}"


def stdio(tag: str, name: str = "local") -> StdioServer:
    return StdioServer(name, [sys.executable, "-m", "tests.compose.tool_server", tag])


class AnswerInput(BaseModel):
    answer: str


def composed(
    servers: Sequence[StdioServer | HttpServer], name: str = "composed", setup_raises: bool = False
) -> type[Environment]:
    """An environment with one tool of its own (`submit`, which pays 1.0 and ends the episode) and `servers`."""

    class Composed(Environment):
        mcp_servers = list(servers)

        @classmethod
        def list_splits(cls) -> list[str]:
            return ["train"]

        @classmethod
        def list_tasks(cls, split: str) -> list[dict[str, Any]]:
            return [{}]

        def setup(self) -> None:
            if setup_raises:
                raise RuntimeError("setup exploded")

        def get_prompt(self) -> list[TextBlock]:
            return [TextBlock(text="use the tools")]

        @tool
        def submit(self, params: AnswerInput) -> ToolOutput:
            """Submit an answer."""
            return ToolOutput(blocks=[TextBlock(text=params.answer)], reward=1.0, finished=True)

    Composed.name = name
    return Composed


WRAPPERS = (b"bwrap", b"setpriv")
"""The processes a sandboxed server runs under (bubblewrap and its init, the id-dropping prefix): not counted."""


def server_pids(tag: str) -> list[int]:
    """Live (not zombie) processes whose command line carries `tag`, but the sandbox's own."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        parts = cmdline.split(b"\0")
        if tag.encode() in parts and state != "Z" and os.path.basename(parts[0]) not in WRAPPERS:
            pids.append(int(entry))
    return pids


def pid_of(tag: str, name: str) -> int:
    """The pid of the tagged server process named `name` (what its `pid` tool answers)."""
    for pid in server_pids(tag):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == name:
                    return pid
        except OSError:
            continue
    raise AssertionError(f"no live tool server process named {name!r}")


def wait_for_pids(tag: str, count: int, within: float = 20.0) -> list[int]:
    """Poll (the processes are not ours to wait on) until exactly `count` tagged processes live."""
    deadline = time.monotonic() + within
    while True:
        pids = server_pids(tag)
        if len(pids) == count or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)
