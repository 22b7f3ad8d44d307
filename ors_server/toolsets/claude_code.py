"""`claude-code`: the seven tools of the Claude Code harness (bash, glob, grep, read, write, edit, todo_write), with
the names and input schemas of `openreward`'s `ClaudeCodeToolset`, acting on the session's sandbox."""

from __future__ import annotations

from typing import Any

from ors_server.environment import tool
from ors_server.toolsets.actions import find_files, read_lines, replace_text, run_shell, search, write_text
from ors_server.toolsets.base import Params, Toolset, text_output
from ors_server.types import ToolOutput


class BashParams(Params):
    command: str
    description: str = ""
    timeout: float | None = 30.0


class GlobParams(Params):
    pattern: str
    path: str | None = None


class GrepParams(Params):
    pattern: str
    path: str | None = None
    glob: str | None = None


class ReadParams(Params):
    file_path: str
    offset: int | None = None
    limit: int | None = None


class WriteParams(Params):
    file_path: str
    content: str


class EditParams(Params):
    file_path: str
    old_string: str
    new_string: str
    replace_all: bool = False


class TodoWriteParams(Params):
    todos: list[dict[str, Any]]


class ClaudeCode(Toolset):
    name = "claude-code"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.todos: list[dict[str, Any]] = []

    @tool
    async def bash(self, params: BashParams) -> ToolOutput:
        """Run a bash command in the sandbox and return its output and exit code. Each command starts in a fresh
        shell in the working directory: files persist between commands, shell state (cd, variables) does not.
        `timeout` is in seconds (default 30, at most 600)."""
        return await run_shell(self.sandbox, params.command, params.timeout)

    @tool
    async def glob(self, params: GlobParams) -> ToolOutput:
        """Find files whose name matches a pattern (`*.py`), or whose path does (`src/**/*.ts`), under a directory
        (default: the working directory)."""
        return await find_files(self.sandbox, params.pattern, params.path)

    @tool
    async def grep(self, params: GrepParams) -> ToolOutput:
        """Search file contents for a regular expression under a path, optionally only in files matching `glob`;
        prints file:line:text for each match."""
        return await search(self.sandbox, params.pattern, params.path, params.glob)

    @tool
    async def read(self, params: ReadParams) -> ToolOutput:
        """Read a file, with line numbers: from line `offset` (1-based), `limit` lines (default 2000)."""
        return await read_lines(self.sandbox, params.file_path, params.offset, params.limit)

    @tool
    async def write(self, params: WriteParams) -> ToolOutput:
        """Write a file (creating its directories), replacing what it held."""
        return await write_text(self.sandbox, params.file_path, params.content)

    @tool
    async def edit(self, params: EditParams) -> ToolOutput:
        """Replace an exact string in a file: it must occur once, unless `replace_all` replaces every occurrence."""
        return await replace_text(
            self.sandbox, params.file_path, params.old_string, params.new_string, params.replace_all
        )

    @tool
    def todo_write(self, params: TodoWriteParams) -> ToolOutput:
        """Keep the task list: each item has content, status (pending, in_progress, completed) and priority."""
        self.todos = params.todos
        lines = ["=== TODO LIST ==="] + [
            f"[{t.get('status', 'pending')}] [{t.get('priority', 'medium')}] {t.get('content', 'No description')}"
            for t in self.todos
        ]
        return text_output("\n".join(lines), todos=self.todos, count=len(self.todos))
