"""A session's tools, as every face lists them and the call pipeline finds them by name.

    the class's shared tools     its `@tool` methods (`Environment.tools`), but those its episode replaces
    its composed tools           those of its MCP tool servers (`Runtime.catalogue`, listed once per class)
    the episode's own tools      its task's and its toolset's (`Episode.own_tools`, found when setup has ended)
    execute_code                 when CodeAct is on for the session (its task spec, its binding config, `--codeact`)

Every one is a `Tool` (`ors_server.runtime.tool`), which the pipeline runs without asking its kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ors_server.codeact.tool import EXECUTE_CODE, codeact_wanted, execute_code_tool
from ors_server.environment import Environment, ToolDef

if TYPE_CHECKING:
    from ors_server.runtime.resources import Runtime
    from ors_server.sessions import Session


class SessionTools:
    """The tools of sessions served over one runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self.default_codeact = runtime.settings.codeact
        self.catalogue = runtime.catalogue
        self.execute_code = execute_code_tool(runtime.codeact_pool)

    def codeact(self, session: Session) -> bool:
        """Whether `session` offers `execute_code`: its task spec's or binding config's `"codeact"`, else
        the server's `--codeact`."""
        return codeact_wanted(self.default_codeact, session.task_spec, session.config)

    def listed(self, env_cls: type[Environment], session: Session | None) -> list[ToolDef]:
        """The tools of `session` (or, without one, of a new session of `env_cls`) in the order clients see them;
        the episode's own are known once its setup has ended."""
        own = session.episode.own_tools if session is not None else None
        tools = [t for t in env_cls.tools.values() if t.shared and not (own and t.name in own)]
        tools += self.catalogue.cached(env_cls)
        if own:
            tools += own.values()
        if self.codeact(session) if session is not None else self.default_codeact:
            tools = [*[t for t in tools if t.name != EXECUTE_CODE], self.execute_code]
        return tools

    def find(self, session: Session, name: str) -> ToolDef | None:
        """The tool `name` of `session`: the same answer as a lookup in `listed`, without building the list (this
        is on every call's path)."""
        if name == EXECUTE_CODE and self.codeact(session):
            return self.execute_code
        own_tools = session.episode.own_tools
        if own_tools:
            found = own_tools.get(name)
            if found is not None:
                return found
        own = session.env_cls.tools.get(name)
        if own is not None:
            return own if own.shared else None  # a task's own tool, and not this task's
        return next((t for t in self.catalogue.cached(session.env_cls) if t.name == name), None)
