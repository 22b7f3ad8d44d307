"""Environments' own ports (`--env-port NAME=PORT`): which environment a request that names none means.

Clients that send no environment name (the `openreward` SDK without a variant, as TRL and SkyRL use it) reach
whatever bare paths mean. A base URL cannot carry the name in a path prefix: the SDK's aiohttp session joins
its absolute paths (`/create`) onto the base URL, which drops the base's path. So each such environment gets a
port of its own on the same server: the server listens there too, and a request that came in on it gets the
port's environment as its default (`faces.PORT_ENV`, read by `faces.env_of`); everything else about the
request is as on the main port.

Behind a front (`--workers`), the front listens on the ports and the workers do not: the front names the port's
environment in `x-ors-port-env` on what it relays (after dropping any a client sent), and a worker of a
deployment with environment ports reads the default from that header.
"""

from __future__ import annotations

from starlette.types import Scope

from ors_server.faces import PORT_ENV

HEADER = b"x-ors-port-env"


class PortEnvs:
    """What one serving process knows of the ports: {port: environment} where it listens on them itself, or only
    that its front names the environment (`behind_front`)."""

    def __init__(self, by_port: dict[int, str], *, behind_front: bool) -> None:
        self.by_port = by_port
        self.behind_front = behind_front

    def mark(self, scope: Scope) -> None:
        """Put the environment of the request's port in its scope, if it came in on one."""
        if self.behind_front:
            for name, value in scope["headers"]:
                if name == HEADER:
                    scope[PORT_ENV] = value.decode("latin-1")
                    return
            return
        server = scope.get("server")
        if server:
            name = self.by_port.get(server[1])
            if name is not None:
                scope[PORT_ENV] = name


def relayed_headers(scope: Scope, by_port: dict[int, str]) -> list[tuple[bytes, bytes]]:
    """The request's headers as a front relays them: without any `x-ors-port-env` of the client's, with the
    front's own when the request came in on an environment's port."""
    headers = [(name, value) for name, value in scope["headers"] if name != HEADER]
    server = scope.get("server")
    name = by_port.get(server[1]) if server else None
    if name is not None:
        headers.append((HEADER, name.encode("latin-1")))
    return headers
