"""The file and shell actions the toolsets share. Each acts through the episode's `Sandbox` only: a command runs
in a fresh bash inside it and a path is resolved by it, so nothing here touches the server's own files.

The toolsets differ in names and shapes of arguments and in how they print; what they do is here once.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import weakref
from collections.abc import Callable

import anyio

from ors_server.sandboxes.interface import DEFAULT_TIMEOUT, MAX_TIMEOUT, CommandResult, Sandbox
from ors_server.toolsets.base import error_output, refusal_output, text_output
from ors_server.types import TextBlock, ToolOutput

READ_LINES = 2000
"""Lines a read returns when the caller names no limit."""
MAX_FILE_BYTES = 4 * 1024 * 1024
"""The largest file a toolset reads or edits."""
SEARCH_TIME_LIMIT = 30.0
"""Seconds a search (find, grep, ls) may take."""

_locks: weakref.WeakKeyDictionary[Sandbox, dict[str, anyio.Lock]] = weakref.WeakKeyDictionary()


def path_lock(sandbox: Sandbox, path: str) -> anyio.Lock:
    """The lock of one file of `sandbox`: a read-modify-write (an edit) holds it, so two calls that may run at
    once (tools of one session run concurrently where the pipeline allows it) never lose each other's change."""
    return _locks.setdefault(sandbox, {}).setdefault(sandbox.resolve(path), anyio.Lock())


class EditRefused(ValueError):
    """An edit that cannot apply as asked (its text is absent, or ambiguous); its message is the agent's to read."""


def command_output(result: CommandResult, time_limit: float | None) -> ToolOutput:
    """A command's output and exit code, with what cut it short."""
    output = result.text()
    notes = []
    if result.truncated:
        notes.append("output exceeded the limit and was cut off")
    if result.timed_out:
        notes.append(f"command hit the {time_limit:g}s time limit and was killed" if time_limit else "timed out")
    suffix = f"\n\n[{'; '.join(notes)}]" if notes else ""
    metadata: dict[str, object] = {"output": output, "exit_code": result.exit_code}
    if result.truncated:
        metadata["truncated"] = True
    if result.timed_out:
        metadata["timed_out"] = True
    return ToolOutput(blocks=[TextBlock(text=f"{output}\n\n(exit {result.exit_code}){suffix}")], metadata=metadata)


def time_limit_of(asked: float | None, default: float = DEFAULT_TIMEOUT) -> float:
    """The seconds a command gets: what the caller asked (at most `MAX_TIMEOUT`), else `default`."""
    return min(asked, MAX_TIMEOUT) if asked is not None and asked > 0 else default


async def run_shell(
    sandbox: Sandbox, command: str, time_limit: float | None, cwd: str | None = None, default: float = DEFAULT_TIMEOUT
) -> ToolOutput:
    """Run `command` in a fresh bash in the sandbox, stderr merged into stdout as a terminal shows them."""
    limit = time_limit_of(time_limit, default)
    try:
        where = sandbox.resolve(cwd) if cwd else None
        result = await sandbox.run(f"exec 2>&1\n{command.strip()}", time_limit=limit, cwd=where)
    except (OSError, ValueError) as exc:
        return error_output("executing command", exc)
    return command_output(result, limit)


async def run_quiet(sandbox: Sandbox, command: str, stdin: bytes | None = None) -> CommandResult:
    """A helper command of a tool (a search, a listing), stderr merged, within the searches' time limit."""
    return await sandbox.run(f"exec 2>&1\n{command}", time_limit=SEARCH_TIME_LIMIT, stdin=stdin)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A path glob as a regular expression over paths relative to the searched directory: `*` and `?` stay within
    one path segment, `**/` spans any number of directories (none included), `[...]` is a character class."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


async def find_files(sandbox: Sandbox, pattern: str, path: str | None) -> ToolOutput:
    """The files under `path` whose name matches `pattern` (`*.py`), or whose path below it does when the pattern
    has a `/` (`src/**/*.ts`), sorted."""
    try:
        where = sandbox.resolve(path or ".")
    except ValueError as exc:
        return error_output("in glob search", exc)
    quoted = shlex.quote(where)
    if "/" not in pattern:
        command = f"find {quoted} -name {shlex.quote(pattern)} -type f | sort"
        result = await run_quiet(sandbox, command)
        return command_output(result, SEARCH_TIME_LIMIT)
    result = await run_quiet(sandbox, f"find {quoted} -type f | sort")
    if result.exit_code != 0:
        return command_output(result, SEARCH_TIME_LIMIT)
    matcher = glob_regex(pattern.removeprefix("./"))
    prefix = where.rstrip("/") + "/"
    found = [line for line in result.text().splitlines() if matcher.match(line.removeprefix(prefix))]
    listed = "\n".join(found) + ("\n" if found else "")
    return text_output(f"{listed}\n\n(exit 0)", output=listed, exit_code=0)


async def search(sandbox: Sandbox, pattern: str, path: str | None, names: str | None) -> ToolOutput:
    """grep's `file:line:text` for each line matching `pattern` under `path`, only in files named like `names`."""
    try:
        where = shlex.quote(sandbox.resolve(path or "."))
    except ValueError as exc:
        return error_output("in grep search", exc)
    if names:
        command = f"find {where} -name {shlex.quote(names)} -type f -exec grep -Hn -- {shlex.quote(pattern)} {{}} +"
    else:
        command = f"grep -rn -- {shlex.quote(pattern)} {where}"
    return command_output(await run_quiet(sandbox, command), SEARCH_TIME_LIMIT)


async def list_directory(sandbox: Sandbox, path: str, ignore: list[str] | None) -> ToolOutput:
    """`ls -la` of a directory, without the entries whose name matches one of the `ignore` globs."""
    try:
        result = await run_quiet(sandbox, f"ls -la -- {shlex.quote(sandbox.resolve(path or '.'))}")
    except ValueError as exc:
        return error_output("listing directory", exc)
    if result.exit_code != 0 or not ignore:
        return command_output(result, SEARCH_TIME_LIMIT)
    kept = [line for line in result.text().splitlines() if not _ignored(line, ignore)]
    listed = "\n".join(kept) + "\n"
    return text_output(f"{listed}\n\n(exit 0)", output=listed, exit_code=0)


def _ignored(line: str, patterns: list[str]) -> bool:
    fields = line.split(maxsplit=8)
    if len(fields) < 9:
        return False  # the "total" line
    name = fields[8].split(" -> ", 1)[0]  # a link's name, not its target
    return name not in (".", "..") and any(fnmatch.fnmatchcase(name, p) for p in patterns)


async def read_text(sandbox: Sandbox, path: str) -> str:
    """The file's text (invalid UTF-8 replaced). Raises OSError (missing, a directory, unreadable) or ValueError
    (larger than `MAX_FILE_BYTES`, a bad path)."""
    return (await sandbox.read_file(path, max_bytes=MAX_FILE_BYTES)).decode(errors="replace")


async def read_lines(sandbox: Sandbox, path: str, offset: int | None, limit: int | None) -> ToolOutput:
    """The file's lines from `offset` (1-based), `limit` of them, numbered as `cat -n` numbers them."""
    try:
        lines = (await read_text(sandbox, path)).splitlines()
    except (OSError, ValueError) as exc:
        return error_output("reading file", exc)
    first = max(offset or 1, 1)
    chosen = lines[first - 1 : first - 1 + (limit or READ_LINES)]
    numbered = "\n".join(f"{first + i:6}\t{line}" for i, line in enumerate(chosen))
    more = len(lines) - (first - 1 + len(chosen))
    note = f"\n\n[{more} more lines: read from line {first + len(chosen)}]" if more > 0 and not limit else ""
    return text_output(f"{numbered}\n\n(exit 0){note}", output=numbered, exit_code=0)


async def write_text(
    sandbox: Sandbox, path: str, content: str, done: str = "Successfully wrote to {path}\n\n(exit 0)"
) -> ToolOutput:
    """Write the file (making its directories), replacing what it held."""
    try:
        async with path_lock(sandbox, path):
            await sandbox.write_file(path, content.encode())
    except (OSError, ValueError) as exc:
        return error_output("writing file", exc)
    return text_output(done.format(path=path), output="", exit_code=0)


async def rewrite(
    sandbox: Sandbox, path: str, change: Callable[[str], str], done: str, what: str = "editing file"
) -> ToolOutput:
    """Read the file, `change` its text and write it back, holding its lock. A change that raises `EditRefused`
    leaves the file as it was and is answered with its message."""
    try:
        async with path_lock(sandbox, path):
            content = (await sandbox.read_file(path, max_bytes=MAX_FILE_BYTES)).decode()
            try:
                updated = change(content)
            except EditRefused as refused:
                return refusal_output(str(refused))
            await sandbox.write_file(path, updated.encode())
    except (OSError, ValueError) as exc:
        return error_output(what, exc)
    return text_output(done, output="", exit_code=0)


def replaced(content: str, old: str, new: str, *, every: bool, path: str, flag: str) -> str:
    """`content` with `old` replaced by `new`: its one occurrence, or every one when `every`. Raises
    `EditRefused` when `old` is absent, or occurs more than once and not `every` (`flag` names the argument that
    allows that)."""
    count = content.count(old) if old else 0
    if count == 0:
        raise EditRefused(f"old_string not found in {path}")
    if count > 1 and not every:
        raise EditRefused(f"old_string appears {count} times in {path}. Must be unique unless {flag}=true.")
    return content.replace(old, new) if every else content.replace(old, new, 1)


async def replace_text(
    sandbox: Sandbox, path: str, old: str, new: str, replace_all: bool, *, flag: str = "replace_all", done: str = ""
) -> ToolOutput:
    """Replace `old` by `new` in the file: every occurrence, or the one occurrence (an error if there are more)."""

    def change(content: str) -> str:
        return replaced(content, old, new, every=replace_all, path=path, flag=flag)

    return await rewrite(sandbox, path, change, done or f"Successfully edited {path}\n\n(exit 0)")
