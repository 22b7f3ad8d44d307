"""Multi-file patches, applied through the sandbox: the `*** Begin Patch` format of Codex's `apply_patch` (which
OpenClaw's `apply_patch` and Hermes's `patch` in patch mode describe to the model), and unified diffs (`patch -p1`)
for a model that sends those instead.

The `*** Begin Patch` format, as this module reads it::

    *** Begin Patch
    *** Add File: path          then the file's lines, each starting with '+'
    *** Delete File: path
    *** Update File: path       optionally followed by '*** Move to: new path'
    @@ a line to find first     (optional) the hunk starts after the next line equal to it
     context line               ' ' kept, '-' removed, '+' added; the kept and removed lines of a hunk are one
    -removed line               run of lines of the file, searched from where the previous hunk ended
    +added line
    *** End of File             (optional) the hunk is at the end of the file
    *** End Patch

Every change is worked out before any file is written, so a patch that does not apply leaves every file as it was.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Literal

from ors_server.sandboxes.interface import Sandbox
from ors_server.toolsets.actions import MAX_FILE_BYTES, SEARCH_TIME_LIMIT, path_lock
from ors_server.toolsets.base import error_output, refusal_output, text_output
from ors_server.types import ToolOutput

BEGIN = "*** Begin Patch"
END = "*** End Patch"
END_OF_FILE = "*** End of File"


class PatchError(ValueError):
    """A patch that cannot be read or does not apply; its message says where."""


@dataclass
class Hunk:
    anchor: str | None
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    at_end: bool = False


@dataclass
class FileChange:
    kind: Literal["add", "delete", "update"]
    path: str
    added: list[str] = field(default_factory=list)
    move_to: str | None = None
    hunks: list[Hunk] = field(default_factory=list)


def is_codex_patch(text: str) -> bool:
    return text.lstrip().startswith(BEGIN)


def parse(text: str) -> list[FileChange]:
    """The file changes of a `*** Begin Patch` text, in order. Raises `PatchError`."""
    lines = text.strip().split("\n")
    if lines[0].strip() != BEGIN:
        raise PatchError(f"the patch must start with '{BEGIN}'")
    if lines[-1].strip() != END:
        raise PatchError(f"the patch must end with '{END}'")
    body = lines[1:-1]
    changes: list[FileChange] = []
    i = 0
    while i < len(body):
        line = body[i]
        if line.startswith("*** Add File: "):
            change = FileChange("add", _path(line, "*** Add File: "))
            i += 1
            while i < len(body) and not body[i].startswith("*** "):
                if not body[i].startswith("+"):
                    raise PatchError(f"in the added file {change.path}: every line starts with '+' ({body[i]!r})")
                change.added.append(body[i][1:])
                i += 1
        elif line.startswith("*** Delete File: "):
            change = FileChange("delete", _path(line, "*** Delete File: "))
            i += 1
        elif line.startswith("*** Update File: "):
            change = FileChange("update", _path(line, "*** Update File: "))
            i += 1
            if i < len(body) and body[i].startswith("*** Move to: "):
                change.move_to = _path(body[i], "*** Move to: ")
                i += 1
            i = _read_hunks(body, i, change)
        elif not line.strip():
            i += 1
            continue
        else:
            raise PatchError(f"expected '*** Add File:', '*** Update File:' or '*** Delete File:', got {line!r}")
        changes.append(change)
    if not changes:
        raise PatchError("the patch changes no file")
    return changes


def _path(line: str, prefix: str) -> str:
    path = line[len(prefix) :].strip()
    if not path:
        raise PatchError(f"{prefix.strip()} names no file")
    return path


def _read_hunks(body: list[str], i: int, change: FileChange) -> int:
    current: Hunk | None = None
    while i < len(body) and (not body[i].startswith("*** ") or body[i].strip() == END_OF_FILE):
        line = body[i]
        if line.startswith("@@"):
            current = Hunk(line[2:].strip() or None)
            change.hunks.append(current)
        elif line.strip() == END_OF_FILE:
            if current is None:
                raise PatchError(f"in {change.path}: '{END_OF_FILE}' before any change")
            current.at_end = True
        else:
            if current is None:
                current = Hunk(None)
                change.hunks.append(current)
            mark, text = (line[0], line[1:]) if line else (" ", "")  # an empty line is an empty context line
            if mark == " ":
                current.old.append(text)
                current.new.append(text)
            elif mark == "-":
                current.old.append(text)
            elif mark == "+":
                current.new.append(text)
            else:
                raise PatchError(f"in {change.path}: a hunk's lines start with ' ', '-' or '+' ({line!r})")
        i += 1
    if not change.hunks and change.move_to is None:
        raise PatchError(f"the update of {change.path} changes nothing")
    return i


def updated(content: str, change: FileChange) -> str:
    """`content` with `change`'s hunks applied, each found at or after where the previous one ended: exactly, else
    ignoring trailing, else surrounding white space. Raises `PatchError`."""
    lines = content.split("\n")
    ends_with_newline = lines[-1] == ""  # an empty file too: lines added to it end with one
    if ends_with_newline:
        lines.pop()
    cursor = 0
    for hunk in change.hunks:
        if hunk.anchor is not None:
            found = _seek(lines, [hunk.anchor], cursor, at_end=False)
            if found is None:
                raise PatchError(f"in {change.path}: no line '{hunk.anchor}' to start the hunk after")
            cursor = found + 1
        if not hunk.old:
            at = len(lines) if hunk.at_end or hunk.anchor is None else cursor
        else:
            found = _seek(lines, hunk.old, cursor, at_end=hunk.at_end)
            if found is None:
                expected = "\n".join(hunk.old)
                raise PatchError(f"in {change.path}: these lines are not in the file:\n{expected}")
            at = found
        lines[at : at + len(hunk.old)] = hunk.new
        cursor = at + len(hunk.new)
    return "\n".join(lines) + ("\n" if ends_with_newline and lines else "")


def _seek(lines: list[str], wanted: list[str], start: int, *, at_end: bool) -> int | None:
    for same in (lambda a, b: a == b, lambda a, b: a.rstrip() == b.rstrip(), lambda a, b: a.strip() == b.strip()):
        starts = [len(lines) - len(wanted)] if at_end else range(start, len(lines) - len(wanted) + 1)
        for at in starts:
            if at >= 0 and all(same(lines[at + k], w) for k, w in enumerate(wanted)):
                return at
    return None


async def apply_codex_patch(sandbox: Sandbox, text: str) -> ToolOutput:
    """Apply a `*** Begin Patch` text to the sandbox's files: all of it, or (when a part does not apply) none."""
    try:
        changes = parse(text)
    except PatchError as exc:
        return refusal_output(f"invalid patch: {exc}")
    writes: dict[str, str] = {}
    deletes: list[str] = []
    summary: list[str] = []
    try:
        for change in changes:
            if change.kind == "add":
                writes[change.path] = "\n".join(change.added) + ("\n" if change.added else "")
                summary.append(f"A {change.path}")
                continue
            current = writes.get(change.path)
            if current is None:
                current = (await sandbox.read_file(change.path, max_bytes=MAX_FILE_BYTES)).decode()
            if change.kind == "delete":
                writes.pop(change.path, None)
                deletes.append(change.path)
                summary.append(f"D {change.path}")
                continue
            target = change.move_to or change.path
            writes[target] = updated(current, change)
            if change.move_to and change.move_to != change.path:
                writes.pop(change.path, None)
                deletes.append(change.path)
            summary.append(f"M {target}")
    except PatchError as exc:
        return refusal_output(f"the patch does not apply, no file was changed: {exc}")
    except (OSError, ValueError) as exc:
        return error_output("applying patch (no file was changed)", exc)
    try:
        for path, content in writes.items():
            async with path_lock(sandbox, path):
                await sandbox.write_file(path, content.encode())
        if deletes:
            quoted = " ".join(shlex.quote(sandbox.resolve(p)) for p in deletes if p not in writes)
            if quoted:
                await sandbox.run(f"rm -f -- {quoted}", time_limit=SEARCH_TIME_LIMIT)
    except (OSError, ValueError) as exc:
        return error_output("applying patch", exc)
    listed = "\n".join(summary)
    return text_output(f"Success. Updated the following files:\n{listed}", output=listed, exit_code=0)


async def apply_unified_diff(sandbox: Sandbox, text: str) -> ToolOutput:
    """Apply a unified diff with `patch -p1` in the sandbox's working directory."""
    try:
        result = await sandbox.run(
            "exec 2>&1\npatch -p1 --batch --forward", stdin=text.encode(), time_limit=SEARCH_TIME_LIMIT
        )
    except (OSError, ValueError) as exc:
        return error_output("applying patch", exc)
    output = result.text()
    if result.exit_code != 0:
        return text_output(
            f"patch failed (exit {result.exit_code}):\n{output}", error=output, exit_code=result.exit_code
        )
    return text_output(f"Successfully applied patch:\n{output}", output=output, exit_code=0)


async def apply_patch(sandbox: Sandbox, text: str) -> ToolOutput:
    """Apply `text`, a `*** Begin Patch` patch or else a unified diff."""
    if is_codex_patch(text):
        return await apply_codex_patch(sandbox, text)
    return await apply_unified_diff(sandbox, text)
