"""What a toolset is: a class of `@tool` methods over a `Sandbox`, made into the session's `ToolDef`s, and the
file and shell actions the toolsets share (each acts through the sandbox, so every path is the sandbox's)."""

from __future__ import annotations

import inspect
import shlex
from collections.abc import Callable
from typing import Any, ClassVar

from ors_server.environment import ToolDef, _input_model, _ToolMethod
from ors_server.sandboxes.interface import MAX_TIMEOUT, CommandResult, Sandbox
from ors_server.types import TextBlock, ToolOutput

READ_LINES = 2000
"""Lines a read returns when the caller names no limit."""
MAX_FILE_BYTES = 4 * 1024 * 1024
"""The largest file a toolset reads or edits."""


class Toolset:
    """A harness's tools over one episode's sandbox. Subclasses set `name` and define `@tool` methods (one pydantic
    model argument each, named as `openreward`'s built-in toolset names it, so the input schemas are the same)."""

    name: ClassVar[str]

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def tools(self) -> dict[str, ToolDef]:
        """The toolset's tools, bound to this instance (what the call pipeline runs as `function(env, *args)`)."""
        found: dict[str, ToolDef] = {}
        for klass in reversed(type(self).__mro__):
            for attr, value in vars(klass).items():
                if isinstance(value, _ToolMethod):
                    doc = inspect.getdoc(value.function) or ""
                    model = _input_model(type(self).__name__, attr, value.function)
                    found[attr] = ToolDef(attr, doc.strip(), model, _bound(value.function, self))
        return found


def _bound(function: Callable[..., Any], toolset: Toolset) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(function):

        async def call_async(env: Any, *args: Any) -> Any:
            return await function(toolset, *args)

        return call_async

    def call(env: Any, *args: Any) -> Any:
        return function(toolset, *args)

    return call


def text_output(text: str, **metadata: Any) -> ToolOutput:
    return ToolOutput(blocks=[TextBlock(text=text)], metadata=metadata or None)


def error_output(what: str, exc: Exception) -> ToolOutput:
    """A failed action as the agent reads it (an observation it can act on, not a crashed call)."""
    return ToolOutput(blocks=[TextBlock(text=f"Error {what}: {exc}")], metadata={"error": str(exc)})


def command_output(result: CommandResult, time_limit: float | None) -> ToolOutput:
    """A command's output and exit code, with what cut it short."""
    output = result.text()
    notes = []
    if result.truncated:
        notes.append("output exceeded the limit and was cut off")
    if result.timed_out:
        notes.append(f"command hit the {time_limit:g}s time limit and was killed" if time_limit else "timed out")
    suffix = f"\n\n[{'; '.join(notes)}]" if notes else ""
    metadata: dict[str, Any] = {"output": output, "exit_code": result.exit_code}
    if result.truncated:
        metadata["truncated"] = True
    if result.timed_out:
        metadata["timed_out"] = True
    return ToolOutput(blocks=[TextBlock(text=f"{output}\n\n(exit {result.exit_code}){suffix}")], metadata=metadata)


async def run_shell(sandbox: Sandbox, command: str, time_limit: float | None, cwd: str | None = None) -> ToolOutput:
    """Run `command` in a fresh bash in the sandbox, stderr merged into stdout as a terminal shows them."""
    limit = min(time_limit, MAX_TIMEOUT) if time_limit and time_limit > 0 else 30.0
    try:
        result = await sandbox.run(f"exec 2>&1\n{command.strip()}", time_limit=limit, cwd=cwd)
    except (OSError, ValueError) as exc:
        return error_output("executing command", exc)
    return command_output(result, limit)


async def find_files(sandbox: Sandbox, pattern: str, path: str | None) -> ToolOutput:
    where = shlex.quote(sandbox.resolve(path or "."))
    return await run_shell(sandbox, f"find {where} -name {shlex.quote(pattern)} -type f | sort", 30.0)


async def search(sandbox: Sandbox, pattern: str, path: str | None, names: str | None) -> ToolOutput:
    where = shlex.quote(sandbox.resolve(path or "."))
    if names:
        command = f"find {where} -name {shlex.quote(names)} -type f -exec grep -Hn -- {shlex.quote(pattern)} {{}} +"
    else:
        command = f"grep -rn -- {shlex.quote(pattern)} {where}"
    return await run_shell(sandbox, command, 30.0)


async def read_lines(sandbox: Sandbox, path: str, offset: int | None, limit: int | None) -> ToolOutput:
    """The file's lines from `offset` (1-based), `limit` of them, numbered as `cat -n` numbers them."""
    try:
        content = (await sandbox.read_file(path, max_bytes=MAX_FILE_BYTES)).decode(errors="replace")
    except (OSError, ValueError) as exc:
        return error_output("reading file", exc)
    lines = content.splitlines()
    first = max(offset or 1, 1)
    chosen = lines[first - 1 : first - 1 + (limit or READ_LINES)]
    numbered = "\n".join(f"{first + i:6}\t{line}" for i, line in enumerate(chosen))
    return text_output(f"{numbered}\n\n(exit 0)", output=numbered, exit_code=0)


async def write_text(sandbox: Sandbox, path: str, content: str) -> ToolOutput:
    try:
        await sandbox.write_file(path, content.encode())
    except (OSError, ValueError) as exc:
        return error_output("writing file", exc)
    return text_output(f"Successfully wrote to {path}\n\n(exit 0)", output="", exit_code=0)


async def replace_text(sandbox: Sandbox, path: str, old: str, new: str, replace_all: bool) -> ToolOutput:
    """Replace `old` by `new` in the file: every occurrence, or the one occurrence (an error if there are more)."""
    try:
        content = (await sandbox.read_file(path, max_bytes=MAX_FILE_BYTES)).decode()
    except (OSError, ValueError) as exc:
        return error_output("editing file", exc)
    count = content.count(old) if old else 0
    if count == 0:
        return text_output(f"Error: old_string not found in {path}", error=f"String not found in {path}")
    if count > 1 and not replace_all:
        return text_output(
            f"Error: old_string appears {count} times in {path}. Must be unique unless replace_all=true.",
            error=f"old_string appears {count} times; use replace_all or provide more context",
        )
    updated = content.replace(old, new) if replace_all else content.replace(old, new, 1)
    try:
        await sandbox.write_file(path, updated.encode())
    except (OSError, ValueError) as exc:
        return error_output("editing file", exc)
    return text_output(f"Successfully edited {path}\n\n(exit 0)", output="", exit_code=0)
