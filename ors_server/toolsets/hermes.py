"""`hermes`: the Hermes Agent harness's five coding tools (terminal, read_file, write_file, search_files, patch),
with the names and input schemas of `openreward`'s `HermesToolset`, acting on the session's sandbox."""

from __future__ import annotations

import difflib
import posixpath
import shlex

from ors_server.environment import tool
from ors_server.toolsets.actions import read_text, replace_text, run_quiet, run_shell, write_text
from ors_server.toolsets.base import Params, Toolset, error_output, refusal_output, text_output
from ors_server.toolsets.patches import apply_patch
from ors_server.types import ToolOutput

MAX_READ_LINES = 2000
"""The most lines one `read_file` answers."""


class TerminalParams(Params):
    command: str
    timeout: int | None = 180


class ReadFileParams(Params):
    path: str
    offset: int = 1
    limit: int = 500


class WriteFileParams(Params):
    path: str
    content: str


class SearchFilesParams(Params):
    pattern: str
    target: str = "content"
    path: str = "."
    file_glob: str | None = None
    limit: int = 50
    offset: int = 0
    output_mode: str = "content"
    context: int = 0


class PatchParams(Params):
    mode: str = "replace"
    path: str | None = None
    old_string: str | None = None
    new_string: str | None = None
    replace_all: bool = False
    patch: str | None = None


class Hermes(Toolset):
    name = "hermes"

    @tool
    async def terminal(self, params: TerminalParams) -> ToolOutput:
        """Run a shell command in the sandbox (a fresh bash in the working directory; files persist between calls)
        and answer its output and exit code. For builds, installs, git, scripts and the like: read, write, search
        and edit files with the other tools. `timeout` in seconds: default 180, at most 600."""
        return await run_shell(self.sandbox, params.command, params.timeout, default=180.0)

    @tool
    async def read_file(self, params: ReadFileParams) -> ToolOutput:
        """Read a text file as `LINE_NUM|CONTENT` lines: `limit` lines (default 500, at most 2000) from line
        `offset` (1-based, default 1). A missing file's answer names files with similar names."""
        try:
            lines = (await read_text(self.sandbox, params.path)).splitlines()
        except FileNotFoundError as exc:
            return error_output("reading file", FileNotFoundError(f"{exc}{await self._similar(params.path)}"))
        except (OSError, ValueError) as exc:
            return error_output("reading file", exc)
        first = max(params.offset, 1)
        chosen = lines[first - 1 : first - 1 + min(max(params.limit, 0), MAX_READ_LINES)]
        numbered = "\n".join(f"{first + i}|{line}" for i, line in enumerate(chosen))
        more = len(lines) - (first - 1 + len(chosen))
        note = f"\n\n[{more} more lines: read from offset {first + len(chosen)}]" if more > 0 else ""
        return text_output(numbered + note, output=numbered, exit_code=0)

    async def _similar(self, path: str) -> str:
        parent, name = posixpath.split(self.sandbox.resolve(path))
        result = await run_quiet(self.sandbox, f"ls -1A -- {shlex.quote(parent)}")
        if result.exit_code != 0:
            return ""
        close = difflib.get_close_matches(name, result.text().splitlines(), n=5, cutoff=0.5)
        return f"; similar: {', '.join(posixpath.join(parent, c) for c in close)}" if close else ""

    @tool
    async def write_file(self, params: WriteFileParams) -> ToolOutput:
        """Write a file, replacing all it held (use `patch` for targeted edits); parent directories are made."""
        return await write_text(self.sandbox, params.path, params.content, done="Successfully wrote to {path}")

    @tool
    async def search_files(self, params: SearchFilesParams) -> ToolOutput:
        """Search under `path`. `target='content'` (default): lines matching an extended regular expression, in
        files whose name matches `file_glob`, as `file:line:text` with `context` lines around
        (`output_mode='files_only'`: the files; `'count'`: matches per file). `target='files'`: the files whose
        name matches the glob `pattern`. `offset` and `limit` (default 50) page through the results."""
        try:
            where = shlex.quote(self.sandbox.resolve(params.path or "."))
        except ValueError as exc:
            return error_output("searching files", exc)
        if params.target == "files":
            command = f"find {where} -type f -name {shlex.quote(params.pattern)} | sort"
            empty = "No files found."
        elif params.target == "content":
            mode = {"files_only": "-l", "count": "-c"}.get(params.output_mode, "-n")
            flags = ["-r", "-E", "-I", mode]
            if params.context > 0 and mode == "-n":
                flags.append(f"-C {params.context}")
            if params.file_glob:
                flags.append(f"--include={shlex.quote(params.file_glob)}")
            command = f"grep {' '.join(flags)} -- {shlex.quote(params.pattern)} {where}"
            empty = "No matches found."
        else:
            return refusal_output(f"unknown target {params.target!r}: use 'content' or 'files'")
        result = await run_quiet(self.sandbox, command)
        if result.exit_code > 1 or (params.target == "files" and result.exit_code != 0):
            said = result.text()
            return text_output(f"search_files failed (exit {result.exit_code}):\n{said}", error=said)
        lines = [line for line in result.text().splitlines() if line.strip()]
        if params.target == "content" and params.output_mode == "count":
            lines = [line for line in lines if not line.endswith(":0")]
        page = lines[max(params.offset, 0) : max(params.offset, 0) + max(params.limit, 0)]
        shown = "\n".join(page)
        rest = len(lines) - max(params.offset, 0) - len(page)
        note = f"\n\n[{rest} more: search again with offset={max(params.offset, 0) + len(page)}]" if rest > 0 else ""
        return text_output((shown or empty) + note, output=shown, exit_code=0, total=len(lines))

    @tool
    async def patch(self, params: PatchParams) -> ToolOutput:
        """Edit files. `mode='replace'` (default): replace `old_string` by `new_string` in the file at `path`;
        it must occur once unless `replace_all`. `mode='patch'`: apply `patch`, a multi-file patch in the
        `*** Begin Patch` format (Add File / Update File / Delete File sections, `@@` hunks of ' ', '-' and '+'
        lines, `*** End Patch`); all of it applies or none."""
        if params.mode == "replace":
            if not params.path or params.old_string is None or params.new_string is None:
                return refusal_output("replace mode needs path, old_string and new_string")
            done = f"Successfully patched {params.path}"
            return await replace_text(
                self.sandbox, params.path, params.old_string, params.new_string, params.replace_all, done=done
            )
        if params.mode == "patch":
            if not params.patch:
                return refusal_output("patch mode needs the patch text in `patch`")
            return await apply_patch(self.sandbox, params.patch)
        return refusal_output(f"unknown patch mode {params.mode!r}: use 'replace' or 'patch'")
