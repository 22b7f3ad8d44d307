"""`Tool`: what the call pipeline runs, whatever the tool's source, and `ToolRun`, what it gives a tool to run with.

Every tool a session offers implements one protocol, and the pipeline (`ors_server.calls`) runs each the same way,
never asking which kind it is:

    ToolDef         an environment's own `@tool` method, a task's or a toolset's (`ors_server.environment`)
    ServerTool      a composed MCP server's tool, called over the episode's connection (`ors_server.compose`)
    HostedTool      a tool of an environment hosted in a process of its own framework (`ors_server.hosting`)
    ExecuteCode     CodeAct's `execute_code` step, whose code calls the other tools back (`ors_server.codeact`)

    check(arguments)        the arguments as `run` takes them; raises `Refused("input_validation", ...)`
    run(run, checked)       the output (anything: the pipeline refuses what is not a `ToolOutput`); may raise
                            `Refused` (a `ToolRejected` of its reason), `ToolFailed` (the call crashed, in the
                            tool's own words), `EnvironmentLost` (the session ends), or anything else (the call
                            crashed: the author's bug, logged)
    record(episode, output) how a `ToolOutput` counts in the episode (a CodeAct step's calls counted themselves)

A tool is described to clients by `name`, `description`, `schema` and `terminal`; `runs_after_finish` lets its
calls reach the environment after a tool finished the episode (a framework such as OpenEnv decides that itself);
`concurrent` and `exclusive` say how its calls share the episode with others (`ors_server.runtime.call_gate`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import anyio

    from ors_server.compose.toolbox import Toolbox
    from ors_server.environment import Environment
    from ors_server.episode import Episode
    from ors_server.settings import Settings
    from ors_server.types import ToolOutput


class Refused(Exception):
    """A call refused for a reason the client can act on (`reason`: one of the pipeline's `ToolRejected` reasons).
    The message reaches the client, with the session's secrets masked."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class ToolFailed(Exception):
    """The tool failed and says why in its own words (a composed server's error, a CodeAct step that produced nothing
    to report): the call crashed with this message as it is, masked, and nothing is logged as an author's bug."""


class Overtime(Exception):
    """Raised by `ToolRun.user_code` when async code was cancelled at the call's deadline (the caller is answered
    `timeout`). A tool that catches it must raise it again, or `EnvironmentLost` from it."""


class EnvironmentLost(Exception):
    """The episode's environment cannot run another call (its host process died, or hung and was retired): the
    pipeline ends the session, and the caller gets this call's error (`timeout` when raised from `Overtime`).
    `why` is logged; the message reaches the client."""

    def __init__(self, message: str, why: str | None = None) -> None:
        super().__init__(message)
        self.why = why or message


class ToolRun(Protocol):
    """One run of a tool, as the pipeline gives it: the episode's environment and connections, and the pipeline's
    services for what a tool cannot do alone."""

    @property
    def env(self) -> Environment:
        """The episode's environment."""

    @property
    def toolbox(self) -> Toolbox | None:
        """The episode's connections to its environment's MCP tool servers (None without any)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def time_limit(self) -> float | None:
        """The call's deadline in seconds (`--tool-timeout`); None inside a CodeAct step, bounded by its own."""

    @property
    def session_id(self) -> str: ...

    def redact(self, text: str) -> str:
        """`text` with the session's secrets masked."""

    async def user_code(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)`, an author's code: awaited, or on a tool thread when sync, within the deadline, with
        progress reports passed on; raises `Overtime`."""

    async def call_tool(self, name: str, arguments: Any) -> Any:
        """Call another tool of the session from inside this one (a CodeAct step's code): checked, run, recorded
        and observed as a call from a face, within this call's hold on the episode (so for an `exclusive` tool
        only). Returns its `ToolOutput`, or the failure (which has a `message`)."""

    def tools(self) -> Sequence[Any]:
        """The session's tools, as clients list them."""

    def until_episode_ends(self) -> AbstractContextManager[anyio.CancelScope]:
        """A scope cancelled when the episode ends (reset, deleted), for a run that can be stopped at once."""


class Tool(Protocol):
    """A tool the pipeline can run (see the module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def schema(self) -> dict[str, Any] | None: ...

    @property
    def terminal(self) -> bool: ...

    @property
    def runs_after_finish(self) -> bool: ...

    @property
    def concurrent(self) -> bool:
        """Its calls overlap with every other call (else the calls of one tool run one at a time)."""

    @property
    def exclusive(self) -> bool:
        """A call of it holds the episode alone (`runtime.call_gate`)."""

    def check(self, arguments: Any) -> Any: ...

    def run(self, run: ToolRun, checked: Any) -> Awaitable[Any]: ...

    def record(self, episode: Episode, output: ToolOutput) -> None: ...


__all__ = ["EnvironmentLost", "Overtime", "Refused", "Tool", "ToolFailed", "ToolRun"]
