"""The environments a server serves, by wire name; the first one is the default."""

from __future__ import annotations

from collections.abc import Iterable

from ors_server.class_checks import check_tasks
from ors_server.environment import Environment
from ors_server.errors import EnvironmentNotFound


class Registry:
    def __init__(self, environments: Iterable[type[Environment]]) -> None:
        self._by_name: dict[str, type[Environment]] = {}
        for env_cls in environments:
            key = env_cls.name.lower()
            if key in self._by_name:
                raise ValueError(f"two environments are named '{env_cls.name}'")
            if not env_cls.tools and not env_cls.mcp_servers:
                raise ValueError(f"environment '{env_cls.name}' has no @tool methods and no MCP tool servers")
            if env_cls.get_prompt is Environment.get_prompt:
                raise ValueError(f"environment '{env_cls.name}' has no get_prompt(): every episode needs a prompt")
            check_tasks(env_cls)
            self._by_name[key] = env_cls
        if not self._by_name:
            raise ValueError("a server needs at least one environment")

    @property
    def names(self) -> list[str]:
        return [env_cls.name for env_cls in self._by_name.values()]

    @property
    def default(self) -> type[Environment]:
        return next(iter(self._by_name.values()))

    def get(self, name: str | None) -> type[Environment]:
        """The environment called `name` (case-insensitive), or the default one for None."""
        if name is None:
            return self.default
        env_cls = self._by_name.get(name.lower())
        if env_cls is None:
            raise EnvironmentNotFound(name)
        return env_cls

    def by_port(self, port_envs: dict[int, str]) -> dict[int, str]:
        """`--env-port`'s {port: name} with each name as this registry spells it; ValueError for a name it lacks."""
        found = {}
        for port, name in port_envs.items():
            env_cls = self._by_name.get(name.lower())
            if env_cls is None:
                served = ", ".join(self.names)
                raise ValueError(f"env_ports: '{name}={port}' names no environment served here (served: {served})")
            found[port] = env_cls.name
        return found
