"""The tools an environment class gains from its MCP tool servers, namespaced, listed once and cached."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from jsonschema.exceptions import best_match  # type: ignore[import-untyped]
from jsonschema.validators import validator_for  # type: ignore[import-untyped]
from mcp import types

from ors_server.compose.results import error_text, to_output
from ors_server.compose.toolbox import Toolbox, ToolServerFailed
from ors_server.environment import ToolDef
from ors_server.runtime.tool import Refused, ToolFailed
from ors_server.types import ToolOutput

if TYPE_CHECKING:
    from ors_server.environment import Environment
    from ors_server.runtime.tool import ToolRun

SEPARATOR = "__"
"""Between a server's name and its tool's: `calc__add` is tool `add` of server `calc`."""


def namespaced(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def _run_by_the_store(*args: Any) -> Any:
    raise RuntimeError("a composed tool is called through the episode's tool server (ServerTool.run)")


@dataclass(frozen=True)
class ServerTool(ToolDef):
    """A tool of a composed MCP server, as the environment lists it (`name` is namespaced, `remote` is not)."""

    server: str = ""
    remote: str = ""

    def check(self, arguments: Any) -> dict[str, Any]:
        """`arguments` checked against the server's input schema, here (the server may check less, or not at all)."""
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict):
            raise Refused("input_validation", f"Tool input validation error: '{self.name}' takes an object")
        schema = self.schema or {}
        error = best_match(validator_for(schema)(schema).iter_errors(arguments))
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path)
            problem = f"{where}: {error.message}" if where else error.message
            raise Refused("input_validation", f"Tool input validation error: {problem}")
        return arguments

    async def run(self, run: ToolRun, checked: dict[str, Any]) -> ToolOutput:
        """Call the tool through the episode's connection to its server: a server that fails or hangs fails this
        call only (`--tool-server-timeout`, within the call's own deadline)."""
        toolbox = run.toolbox
        if toolbox is None:
            raise Refused("session_ended", f"'{self.name}' was not run: the session has no live environment.")
        timeout = run.settings.tool_server_timeout
        if run.time_limit is not None:
            timeout = min(timeout, run.time_limit)
        try:
            result = await toolbox.call(self.server, self.remote, checked, timeout)
        except TimeoutError:
            raise Refused("timeout", f"'{self.name}' did not finish within {timeout:g} s and was abandoned") from None
        except ToolServerFailed as exc:
            raise ToolFailed(str(exc)) from None
        if result.is_error:
            raise ToolFailed(error_text(result))
        return to_output(result)


def _server_tool(server: str, tool: types.Tool) -> ServerTool:
    return ServerTool(
        name=namespaced(server, tool.name),
        description=tool.description or "",
        input_model=None,
        function=_run_by_the_store,
        input_schema=dict(tool.input_schema),
        server=server,
        remote=tool.name,
    )


class Catalogue:
    """The composed tools of each environment class: listed from its servers the first time they are needed (by a
    listing, or by the first episode's own connections) and then cached for the life of the process, so every
    session and every face lists the same tools. A failed listing is not cached: the next need tries again."""

    def __init__(self) -> None:
        self._tools: dict[type[Environment], list[ServerTool]] = {}
        self._locks: dict[type[Environment], anyio.Lock] = {}

    def cached(self, env_cls: type[Environment]) -> list[ServerTool]:
        return self._tools.get(env_cls, [])

    async def load(
        self,
        env_cls: type[Environment],
        task_group: anyio.abc.TaskGroup,
        within: float,
        toolbox: Toolbox | None = None,
    ) -> list[ServerTool]:
        """The class's composed tools, listed through `toolbox` (an episode's open connections) or, without one,
        through connections opened and closed for the purpose. Raises ToolServerFailed."""
        servers: Sequence[Any] = env_cls.mcp_servers
        if not servers or env_cls in self._tools:
            return self.cached(env_cls)
        async with self._locks.setdefault(env_cls, anyio.Lock()):
            if env_cls in self._tools:
                return self._tools[env_cls]
            own = toolbox is None
            box = toolbox if toolbox is not None else Toolbox(servers)
            try:
                if own:
                    await box.open(task_group, within)
                tools = [_server_tool(s.name, t) for s in servers for t in await box.list_tools(s.name, within)]
            finally:
                if own:
                    await box.close(within)
            clashes = sorted({t.name for t in tools} & set(env_cls.tools))
            if clashes:
                raise ToolServerFailed(f"composed tools {clashes} clash with tools of {env_cls.name} itself")
            self._tools[env_cls] = tools
            return tools
