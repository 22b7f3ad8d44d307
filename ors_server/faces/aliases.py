"""Names of sessions besides their store keys, given by the face that minted them.

The MCP face gives each transport an `mcp-session-id` of its own; the control plane accepts those as session names
(Eval Protocol's client may send either), and a worker behind a front answers lookups for them. Those readers
reach the MCP face's names only through this core object, never through the face itself.
"""

from __future__ import annotations

from collections.abc import Callable

Resolver = Callable[[str], "str | None"]


def _nobody(name: str) -> str | None:
    return None


class Aliases:
    """The faces' resolvers of their own names.

    `key_for(name)` is the store key `name` stands for, or None when no face gave that name. It is the one
    resolver itself when there is one (every control-plane request asks, so it costs one call, as before faces
    went through the core), and asks each in turn when there are more."""

    def __init__(self) -> None:
        self._resolvers: list[Resolver] = []
        self.key_for: Resolver = _nobody

    def add(self, resolver: Resolver) -> None:
        self._resolvers.append(resolver)
        self.key_for = resolver if len(self._resolvers) == 1 else self._ask_each

    def _ask_each(self, name: str) -> str | None:
        for resolve in self._resolvers:
            key = resolve(name)
            if key is not None:
                return key
        return None
