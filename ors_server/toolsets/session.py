"""A session's own tools: those of its task (`Environment.list_task_tools`) and of the toolset it asked for.

They are found once per episode, when its setup has ended (`episode_tools`), and kept on the episode: the call
pipeline lists them after the class's shared tools and resolves them first, so every face lists and calls them.
A toolset's tool replaces an environment's tool of the same name, as in `openreward`'s server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ors_server.environment import Environment, ToolDef


async def episode_tools(
    env: Environment, toolset: str | None, run: Callable[[Callable[..., Any]], Awaitable[Any]]
) -> dict[str, ToolDef]:
    """The tools `env`'s episode has beyond its class's shared ones, by name. `run` runs the author's code (sync
    on a worker thread). Raises TypeError when `list_task_tools()` names something that is not a tool."""
    env_cls = type(env)
    tools: dict[str, ToolDef] = {}
    if env_cls.has_task_tools():
        for entry in await run(env.list_task_tools):
            found = env_cls.tools.get(entry) if isinstance(entry, str) else entry
            if not isinstance(found, ToolDef):
                raise TypeError(
                    f"{env_cls.__name__}.list_task_tools() returned {entry!r}: give names of the class's @tool "
                    f"methods, or ToolDefs"
                )
            tools[found.name] = found
    if toolset is not None:
        from ors_server.toolsets import toolset_tools  # the package imports this module: not at its top

        sandbox = env.toolset_sandbox()
        if sandbox is None:
            raise RuntimeError(f"this '{env_cls.name}' episode has no sandbox for the toolset '{toolset}'")
        tools.update(toolset_tools(toolset, sandbox))
    return tools
