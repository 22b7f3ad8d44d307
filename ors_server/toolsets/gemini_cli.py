"""`gemini-cli`: the Gemini CLI harness's eight tools (run_shell_command, glob, grep_search, read_file, write_file,
replace, list_directory, write_todos), with the names and input schemas of `openreward`'s `GeminiCliToolset`,
acting on the session's sandbox."""

from __future__ import annotations

import shlex
from typing import Any, Literal

from ors_server.environment import tool
from ors_server.toolsets.actions import (
    SEARCH_TIME_LIMIT,
    command_output,
    find_files,
    list_directory,
    read_lines,
    replace_text,
    run_quiet,
    run_shell,
    write_text,
)
from ors_server.toolsets.base import Params, Toolset, error_output, text_output
from ors_server.types import ToolOutput

SHELL_TIME_LIMIT = 300.0
"""Seconds a shell command gets (the tool takes no timeout)."""
MAX_MATCHES = 100
"""Matches a search answers when the call names no `total_max_matches`."""


class RunShellCommandParams(Params):
    command: str
    description: str = ""
    dir_path: str | None = None
    is_background: bool = False
    delay_ms: float | None = None


class GlobParams(Params):
    pattern: str
    dir_path: str | None = None


class GrepSearchParams(Params):
    pattern: str
    dir_path: str | None = None
    include_pattern: str | None = None
    exclude_pattern: str | None = None
    names_only: bool = False
    max_matches_per_file: int | None = None
    total_max_matches: int | None = None


class ReadFileParams(Params):
    file_path: str
    start_line: int | None = None
    end_line: int | None = None


class WriteFileParams(Params):
    file_path: str
    content: str


class ReplaceParams(Params):
    file_path: str
    old_string: str
    new_string: str
    allow_multiple: bool = False
    instruction: str | None = None


class ListDirectoryParams(Params):
    dir_path: str
    ignore: list[str] | None = None


class TodoItem(Params):
    description: str
    status: Literal["pending", "in_progress", "completed", "cancelled", "blocked"]


class WriteTodosParams(Params):
    todos: list[TodoItem]


class GeminiCli(Toolset):
    name = "gemini-cli"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.todos: list[TodoItem] = []

    @tool
    async def run_shell_command(self, params: RunShellCommandParams) -> ToolOutput:
        """Run a command with `bash -c` in the sandbox, in `dir_path` (default: the working directory); answers its
        output (stderr merged) and exit code, within 300 seconds. Files persist between commands; nothing a command
        starts outlives it, so `is_background` still waits for the command."""
        return await run_shell(self.sandbox, params.command, None, cwd=params.dir_path, default=SHELL_TIME_LIMIT)

    @tool
    async def glob(self, params: GlobParams) -> ToolOutput:
        """Find the files matching a glob (`*.md` by name at any depth, `src/**/*.ts` by path) under `dir_path`
        (default: the working directory); answers their absolute paths, sorted."""
        return await find_files(self.sandbox, params.pattern, params.dir_path)

    @tool
    async def grep_search(self, params: GrepSearchParams) -> ToolOutput:
        """Search file contents under `dir_path` for an extended regular expression: `file:line:text` per match
        (only file names with `names_only`), in files whose name matches `include_pattern`, leaving out lines that
        match `exclude_pattern`. At most 100 matches unless `total_max_matches` says otherwise."""
        try:
            where = shlex.quote(self.sandbox.resolve(params.dir_path or "."))
        except ValueError as exc:
            return error_output("in grep search", exc)
        flags = ["-r", "-E", "-I", "-l" if params.names_only else "-n"]
        if params.include_pattern:
            flags.append(f"--include={shlex.quote(params.include_pattern)}")
        if params.max_matches_per_file is not None:
            flags.append(f"-m {max(params.max_matches_per_file, 0)}")
        command = f"grep {' '.join(flags)} -- {shlex.quote(params.pattern)} {where}"
        if params.exclude_pattern:
            command += f" | grep -v -E -- {shlex.quote(params.exclude_pattern)}; exit ${{PIPESTATUS[0]}}"
        result = await run_quiet(self.sandbox, command)
        total = params.total_max_matches if params.total_max_matches is not None else MAX_MATCHES
        lines = result.text().splitlines()
        if result.exit_code > 1 or len(lines) <= total:
            return command_output(result, SEARCH_TIME_LIMIT)
        kept = "\n".join(lines[: max(total, 0)]) + "\n"
        note = f"[{len(lines) - total} more matches not shown]"
        return text_output(f"{kept}\n\n(exit 0)\n\n{note}", output=kept, exit_code=0, truncated=True)

    @tool
    async def read_file(self, params: ReadFileParams) -> ToolOutput:
        """Read a file with numbered lines, from `start_line` to `end_line` (1-based, both included). Without an
        end, at most 2000 lines, and the answer says where the rest begins."""
        first = params.start_line or 1
        count = params.end_line - first + 1 if params.end_line is not None else None
        if count is not None and count < 1:
            return text_output("Error: end_line is before start_line", error="end_line is before start_line")
        return await read_lines(self.sandbox, params.file_path, first, count)

    @tool
    async def write_file(self, params: WriteFileParams) -> ToolOutput:
        """Write `content` to a file, replacing what it held; missing directories are made."""
        return await write_text(self.sandbox, params.file_path, params.content)

    @tool
    async def replace(self, params: ReplaceParams) -> ToolOutput:
        """Replace `old_string` by `new_string` in a file, matched literally. It must occur exactly once unless
        `allow_multiple` replaces every occurrence; otherwise the file is left as it was."""
        return await replace_text(
            self.sandbox,
            params.file_path,
            params.old_string,
            params.new_string,
            params.allow_multiple,
            flag="allow_multiple",
        )

    @tool
    async def list_directory(self, params: ListDirectoryParams) -> ToolOutput:
        """List a directory's files and subdirectories (`ls -la`), leaving out names that match an `ignore` glob."""
        return await list_directory(self.sandbox, params.dir_path, params.ignore)

    @tool
    def write_todos(self, params: WriteTodosParams) -> ToolOutput:
        """Keep the list of subtasks of the request (each with a description and a status: pending, in_progress,
        completed, cancelled or blocked); the new list replaces the old."""
        self.todos = params.todos
        lines = ["=== TODO LIST ==="] + [f"[{t.status}] {t.description}" for t in self.todos]
        return text_output("\n".join(lines), todos=[t.model_dump() for t in self.todos], count=len(self.todos))
