"""`Server`: serve environments from a script, as `openreward.environments.Server` does.

if __name__ == "__main__":
    Server([MyEnv]).run(host="0.0.0.0", port=8080)
"""

from __future__ import annotations

import dataclasses
import errno
import gc
import logging
import socket
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette

from ors_server.environment import Environment
from ors_server.http.app import create_app
from ors_server.http.http_protocol import BoundedHttpToolsProtocol
from ors_server.http.websocket_protocol import BoundedWebSocketProtocol
from ors_server.settings import Settings


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger("ors_server")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False


class Server:
    """The environments (the first is the default) and the settings to serve them with."""

    def __init__(self, environments: Sequence[type[Environment]], settings: Settings | None = None, **options: Any):
        self.settings = dataclasses.replace(settings or Settings.from_env(), **options)
        self.app: Starlette = create_app(environments, self.settings)

    def run(self, host: str | None = None, port: int | None = None) -> None:
        """Serve until interrupted (SIGINT or SIGTERM), then end every session cleanly. An address that cannot
        be listened on (in use, say) exits with one line naming it."""
        host = host or self.settings.host
        try:
            sockets = listen_all(self.settings, host, port)
        except CannotListen as exc:
            raise SystemExit(f"ors-server: {exc}") from None
        configure_logging(self.settings.log_level)
        config = uvicorn_config(self.app, self.settings, host=host, port=sockets[0].getsockname()[1])
        announce(sockets, self.settings.port_envs)
        UvicornServer(config, on_exit=self.app.state.store.stop_admitting).run(sockets=sockets)


BACKLOG = 2048  # uvicorn's default


class CannotListen(Exception):
    """The server's address cannot be bound (the message is one line: the address and why)."""


def listen_all(settings: Settings, host: str | None = None, port: int | None = None) -> list[socket.socket]:
    """`listen` on the server's port (`host` and `port` unless given), then on each environment's own port
    (`--env-port`): all of them or none."""
    host = settings.host if host is None else host
    sockets = listen(host, settings.port if port is None else port)
    try:
        for env_port, name in settings.port_envs.items():
            sockets += listen(host, env_port, flag=f"--env-port {name}=PORT")
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def listen(host: str, port: int, flag: str = "--port") -> list[socket.socket]:
    """Sockets listening on every address `host` names (a name may have an IPv4 and an IPv6 one, as asyncio and
    uvicorn bind them), for uvicorn to serve on. Binding before anything else starts (workers, fronts, Ray) makes
    an address in use one clear line in every mode, instead of uvicorn's log line after the workers started, or a
    traceback. `flag`: the one that sets this port, which that line says to change."""
    infos = _addresses(host, port)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, address in infos:
            if sockets and port == 0:  # one port for all, the one chosen for the first
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sockets.append(_bound(host, port, family, kind, proto, address, v6only=len(infos) > 1, flag=flag))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def bind(host: str, port: int, *, reuse_port: bool = False, flag: str = "--port") -> socket.socket:
    """One socket listening on the first address `host` names (`reuse_port`: for a SO_REUSEPORT group)."""
    family, kind, proto, address = _addresses(host, port)[0]
    return _bound(host, port, family, kind, proto, address, reuse_port=reuse_port, flag=flag)


def _addresses(host: str, port: int) -> list[tuple[int, int, int, Any]]:
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    unique = {(family, address[:2]): (family, kind, proto, address) for family, kind, proto, _, address in infos}
    return list(unique.values())


def _bound(
    host: str,
    port: int,
    family: int,
    kind: int,
    proto: int,
    address: Any,
    reuse_port: bool = False,
    v6only: bool = False,
    flag: str = "--port",
) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if v6only and family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # its IPv4 twin has its own socket
        sock.bind(address)
        # Listening at once holds the address: two sockets only bound with SO_REUSEADDR could share it.
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise CannotListen(
                f"{host}:{port} is already in use (another process listens there): stop it or choose another {flag}"
            ) from None
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def announce(sockets: list[socket.socket], port_envs: dict[int, str] | None = None) -> None:
    """Where the server listens (uvicorn says it only when it binds the address itself), and which environment
    each environment port (`--env-port`) serves by default."""
    for sock in sockets:
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        env = (port_envs or {}).get(port)
        if env is None:
            logging.getLogger("ors_server").info("serving on http://%s:%d (press CTRL+C to quit)", shown, port)
        else:
            logging.getLogger("ors_server").info("serving %s on http://%s:%d, its own port", env, shown, port)


WS_PING_INTERVAL = 20.0
WS_PING_TIMEOUT = 20.0
"""Seconds between pings of a quiet WebSocket, and how long its pong may take before the socket is dropped."""


def uvicorn_config(app: Starlette, settings: Settings, **options: Any) -> uvicorn.Config:
    """How uvicorn serves `app` (at `host` and `port`, or `uds`, in `options`): our bounded HTTP protocol, our
    access log, our shutdown grace."""
    config: dict[str, Any] = {
        "http": BoundedHttpToolsProtocol.bounded_by(settings, getattr(app.state, "faces", None)),
        "log_level": settings.log_level,
        "timeout_keep_alive": 60,
        "access_log": False,  # ours (ors_server.access) carries the session, environment and tool
        "timeout_graceful_shutdown": int(settings.shutdown_grace) or None,
        # WebSocket frames (the OpenEnv face) are bounded like request bodies; pings find peers that are gone
        # without a close (a half-open socket would otherwise hold its session forever).
        "ws": BoundedWebSocketProtocol.bounded_by(settings),  # what a client that does not read may queue
        "ws_max_size": settings.max_body_bytes,
        "ws_ping_interval": WS_PING_INTERVAL,
        "ws_ping_timeout": WS_PING_TIMEOUT,
    }
    return uvicorn.Config(app, **{**config, **options})


class UvicornServer(uvicorn.Server):
    """uvicorn for every process of a deployment that serves (a server, a worker, a front).

    `on_exit` runs the moment a shutdown signal arrives, before uvicorn stops accepting: a server stops admitting
    sessions then (so the grace for in-flight calls counts from the signal rather than from when connections
    have closed), a front drains its workers. And what the process loaded at startup is taken out of the
    garbage collector's sight."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self.on_exit = on_exit

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # Modules, schemas and the app (~100k objects) live as long as the process, yet every full collection
        # walked them again: ~70 ms each, about half the collector's time on the call path. Frozen, they are
        # skipped; the garbage among them goes first.
        gc.collect()
        gc.freeze()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.on_exit is not None:
            self.on_exit()
        super().handle_exit(sig, frame)
