"""`openclaw`: the OpenClaw harness's six coding tools (exec, process, read, write, edit, apply_patch), with the
names and input schemas of `openreward`'s `OpenClawToolset`, acting on the session's sandbox."""

from __future__ import annotations

from ors_server.environment import tool
from ors_server.toolsets.actions import EditRefused, read_text, rewrite, run_shell, write_text
from ors_server.toolsets.base import Params, Toolset, error_output, refusal_output, text_output
from ors_server.toolsets.patches import apply_patch
from ors_server.types import ToolOutput

PROCESS_ACTIONS = ("list", "poll", "log", "write", "kill", "remove")


class ExecParams(Params):
    command: str
    timeout: float | None = 1800.0


class ReadParams(Params):
    path: str
    offset: int | None = None
    limit: int | None = None


class WriteParams(Params):
    path: str
    content: str


class EditItem(Params):
    oldText: str  # noqa: N815 (the harness's own field names)
    newText: str  # noqa: N815


class EditParams(Params):
    path: str
    edits: list[EditItem]


class ApplyPatchParams(Params):
    input: str


class ProcessParams(Params):
    action: str
    sessionId: str | None = None  # noqa: N815
    data: str | None = None
    eof: bool | None = None
    offset: int | None = None
    limit: int | None = None


class OpenClaw(Toolset):
    name = "openclaw"

    @tool
    async def exec(self, params: ExecParams) -> ToolOutput:
        """Run a shell command in the sandbox (a fresh bash in the working directory; files persist) and answer its
        output and exit code. `timeout` in seconds: the sandbox allows at most 600."""
        return await run_shell(self.sandbox, params.command, params.timeout)

    @tool
    async def process(self, params: ProcessParams) -> ToolOutput:
        """Background sessions. Here every command runs in the foreground (`exec` waits for it, and nothing it
        starts outlives it), so there are none: `list` answers an empty list, and `poll`, `log`, `write`, `kill`
        and `remove` of a `sessionId` answer that it does not exist."""
        if params.action not in PROCESS_ACTIONS:
            return refusal_output(f"unknown process action {params.action!r}: use {', '.join(PROCESS_ACTIONS)}")
        if params.action == "list":
            return text_output("No background sessions: every command runs in the foreground here.", sessions=[])
        if not params.sessionId:
            return refusal_output(f"the action '{params.action}' needs a sessionId")
        return refusal_output(
            f"no background session {params.sessionId!r}: commands run in the foreground here (exec waits for them)"
        )

    @tool
    async def read(self, params: ReadParams) -> ToolOutput:
        """Read a file's text; `offset` (1-based line) and `limit` (lines) page through a large file."""
        try:
            lines = (await read_text(self.sandbox, params.path)).splitlines()
        except (OSError, ValueError) as exc:
            return error_output("reading file", exc)
        if params.offset is not None or params.limit is not None:
            first = max(params.offset or 1, 1) - 1
            lines = lines[first:] if params.limit is None else lines[first : first + max(params.limit, 0)]
        shown = "\n".join(lines)
        return text_output(shown, output=shown, exit_code=0)

    @tool
    async def write(self, params: WriteParams) -> ToolOutput:
        """Write a file, creating it and its directories or replacing what it held (use `edit` for changes)."""
        return await write_text(self.sandbox, params.path, params.content, done="Successfully wrote to {path}")

    @tool
    async def edit(self, params: EditParams) -> ToolOutput:
        """Apply text replacements to a file, in order: each edit's `oldText` must occur exactly once in the text
        the previous edits left, and is replaced by its `newText`. All or nothing."""
        path = params.path

        def change(content: str) -> str:
            for item in params.edits:
                count = content.count(item.oldText) if item.oldText else 0
                if count != 1:
                    found = "not found" if count == 0 else f"found {count} times, it must be unique"
                    raise EditRefused(f"oldText {found} in {path}: {item.oldText[:100]!r}")
                content = content.replace(item.oldText, item.newText, 1)
            return content

        return await rewrite(self.sandbox, path, change, f"Successfully edited {path}")

    @tool
    async def apply_patch(self, params: ApplyPatchParams) -> ToolOutput:
        """Change several files at once with a patch between `*** Begin Patch` and `*** End Patch`: sections
        `*** Add File: path` (lines starting with '+'), `*** Delete File: path` and `*** Update File: path`
        (optionally `*** Move to: path`) with `@@` hunks of context ' ', removed '-' and added '+' lines, and
        `*** End of File` for a hunk at the end. All of it applies or none."""
        return await apply_patch(self.sandbox, params.input)
