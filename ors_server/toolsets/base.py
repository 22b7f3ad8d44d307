"""What a toolset is: a class of `@tool` methods over a `Sandbox`, made into the session's `ToolDef`s, and the
shapes of what its tools answer (the file and shell actions they share are in `toolsets.actions`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from ors_server.environment import ToolDef, _input_model, _ToolMethod
from ors_server.sandboxes.interface import Sandbox
from ors_server.types import TextBlock, ToolOutput


class Params(BaseModel):
    """A tool's input model: unknown fields refused, as `openreward`'s toolsets declare theirs (the schema says
    `additionalProperties: false`). Subclasses are named as `openreward` names them: the name is the schema's
    title."""

    model_config = ConfigDict(extra="forbid")


class Toolset:
    """A harness's tools over one episode's sandbox. Subclasses set `name` and define `@tool` methods (one pydantic
    model argument each, named as `openreward`'s built-in toolset names it, so the input schemas are the same)."""

    name: ClassVar[str]
    concurrent: ClassVar[bool] = True
    """Its tools' calls overlap with every other call of the session, as `openreward` declares every tool of its
    harness toolsets (`@tool(concurrent=True)`): they grant no reward, and an edit holds its file's lock
    (`actions.path_lock`)."""

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
                    concurrent = value.concurrent or self.concurrent
                    found[attr] = ToolDef(attr, doc.strip(), model, _bound(value.function, self), concurrent=concurrent)
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


def refusal_output(message: str) -> ToolOutput:
    """An action the tool would not take as asked (the file is left as it was)."""
    return ToolOutput(blocks=[TextBlock(text=f"Error: {message}")], metadata={"error": message})
