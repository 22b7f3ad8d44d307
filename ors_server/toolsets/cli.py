"""`cli`: a generic command-line harness's nine tools (bash, glob, grep, ls, read, write, edit, multi_edit,
todo_write), with the names and input schemas of `openreward`'s `CLIToolset`, acting on the session's sandbox."""

from __future__ import annotations

from typing import Any, Literal

from ors_server.environment import tool
from ors_server.toolsets.actions import (
    EditRefused,
    find_files,
    list_directory,
    read_lines,
    replace_text,
    replaced,
    rewrite,
    run_shell,
    search,
    write_text,
)
from ors_server.toolsets.base import Params, Toolset, text_output
from ors_server.types import ToolOutput

BASH_TIME_LIMIT = 300.0
"""Seconds a `bash` command gets when the call names no `timeout` (the schema's default is none)."""


class BashParams(Params):
    command: str
    timeout: float | None = None


class GlobParams(Params):
    pattern: str
    path: str | None = None


class GrepParams(Params):
    pattern: str
    path: str | None = None
    include: str | None = None


class LSParams(Params):
    path: str = "."
    ignore: list[str] | None = None


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


class MultiEditParams(Params):
    file_path: str
    edits: list[dict[str, Any]]


class TodoItem(Params):
    content: str
    status: Literal["pending", "in_progress", "completed"] = "pending"
    priority: Literal["low", "medium", "high"] = "medium"
    id: str | None = None


class TodoWriteParams(Params):
    todos: list[TodoItem]


class CLI(Toolset):
    name = "cli"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.todos: list[TodoItem] = []

    @tool
    async def bash(self, params: BashParams) -> ToolOutput:
        """Run a bash command in the sandbox; answers its output (stderr merged) and exit code. Every command starts
        in a fresh shell in the working directory: files persist, `cd` and variables do not. `timeout` in seconds
        (default 300, at most 600)."""
        return await run_shell(self.sandbox, params.command, params.timeout, default=BASH_TIME_LIMIT)

    @tool
    async def glob(self, params: GlobParams) -> ToolOutput:
        """List the files matching a name pattern (`*.rs`) or a path pattern (`src/**/*.rs`) under `path` (default:
        the working directory)."""
        return await find_files(self.sandbox, params.pattern, params.path)

    @tool
    async def grep(self, params: GrepParams) -> ToolOutput:
        """Search file contents under `path` for a regular expression; `include` keeps only files whose name
        matches that glob. One `file:line:text` per match."""
        return await search(self.sandbox, params.pattern, params.path, params.include)

    @tool
    async def ls(self, params: LSParams) -> ToolOutput:
        """A directory's entries with their details (`ls -la`), leaving out names matching an `ignore` glob."""
        return await list_directory(self.sandbox, params.path, params.ignore)

    @tool
    async def read(self, params: ReadParams) -> ToolOutput:
        """A file's lines, numbered: from line `offset` (1-based), `limit` of them (default 2000)."""
        return await read_lines(self.sandbox, params.file_path, params.offset, params.limit)

    @tool
    async def write(self, params: WriteParams) -> ToolOutput:
        """Write a file, replacing its content; missing directories are made."""
        return await write_text(self.sandbox, params.file_path, params.content)

    @tool
    async def edit(self, params: EditParams) -> ToolOutput:
        """Replace an exact piece of text in a file (matched literally, across lines too). It must occur once,
        unless `replace_all` replaces every occurrence."""
        return await replace_text(
            self.sandbox, params.file_path, params.old_string, params.new_string, params.replace_all
        )

    @tool
    async def multi_edit(self, params: MultiEditParams) -> ToolOutput:
        """Apply several edits to one file, in order, each `{old_string, new_string, replace_all?}` seeing the
        text the previous left. All or nothing: if one cannot apply, the file is left as it was."""
        path = params.file_path
        total = 0

        def change(content: str) -> str:
            nonlocal total
            for number, edit in enumerate(params.edits, 1):
                old, new = edit.get("old_string"), edit.get("new_string")
                if not isinstance(old, str) or not isinstance(new, str):
                    raise EditRefused(f"edit {number} needs old_string and new_string (strings)")
                every = bool(edit.get("replace_all", False))
                total += content.count(old) if every else 1
                content = replaced(content, old, new, every=every, path=path, flag="replace_all")
            return content

        out = await rewrite(self.sandbox, path, change, "", what="in multi-edit")
        if out.metadata and "error" in out.metadata:
            return out
        return text_output(
            f"Successfully applied {len(params.edits)} edits with {total} total replacements",
            total_replacements=total,
            edits_applied=len(params.edits),
        )

    @tool
    def todo_write(self, params: TodoWriteParams) -> ToolOutput:
        """Replace the task list (each item: content, status, priority, optional id) and show it."""
        self.todos = params.todos
        lines = ["=== TODO LIST ==="] + [f"[{t.status}] [{t.priority}] {t.content}" for t in self.todos]
        return text_output("\n".join(lines), todos=[t.model_dump() for t in self.todos], count=len(self.todos))
