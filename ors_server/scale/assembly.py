"""The front of a deployment, built one way wherever it runs: in the `--workers` process, as one of `--fronts M`
processes, or beside a Ray cluster. Only what it is told of its workers differs (`lifespan`, `on_unreachable`,
`on_placed`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import uvicorn

from ors_server.http.guards import HeaderChecks
from ors_server.http.http_protocol import BoundedHttpToolsProtocol
from ors_server.http.server import WS_PING_INTERVAL, WS_PING_TIMEOUT
from ors_server.http.websocket_protocol import BoundedWebSocketProtocol
from ors_server.ids import WorkerTag
from ors_server.scale.front import Front
from ors_server.scale.refusals import Refusals
from ors_server.scale.table import Worker, WorkerTable
from ors_server.settings import Settings


def build_front(
    settings: Settings,
    table: WorkerTable,
    *,
    lifespan: Callable[[], AbstractAsyncContextManager[Any]],
    on_unreachable: Callable[[Worker], None],
    name: str = "0",
    on_placed: Callable[[str, WorkerTag], None] | None = None,
    on_revoked: Callable[[bytes], None] | None = None,
) -> Front:
    """A front routing to `table`'s workers, checking what a single server checks before anything is forwarded
    (Host, Origin, API key, body size), and refusing in each face's shape."""
    return Front(
        table,
        Refusals(),
        checks=HeaderChecks.from_settings(settings),
        max_body_bytes=settings.max_body_bytes,
        directory_size=settings.front_directory_size,
        lifespan=lifespan,
        on_unreachable=on_unreachable,
        name=name,
        on_placed=on_placed,
        on_revoked=on_revoked,
        port_envs=settings.port_envs,  # it listens on them (`server.listen_all`), and tells the workers
    )


def front_config(front: Front, settings: Settings) -> uvicorn.Config:
    """The uvicorn config a front serves with, local or on Ray (bound to `settings.host:settings.port`, unless
    it is handed a listening socket)."""
    return uvicorn.Config(
        front,
        host=settings.host,
        port=settings.port,
        http=BoundedHttpToolsProtocol.bounded_by(settings, front.refusals.faces),  # the front is what clients reach
        ws=BoundedWebSocketProtocol.bounded_by(settings),
        ws_max_size=settings.max_body_bytes,
        ws_ping_interval=WS_PING_INTERVAL,
        ws_ping_timeout=WS_PING_TIMEOUT,
        log_level=settings.log_level,
        timeout_keep_alive=60,
        access_log=False,
        server_header=False,  # the workers' own headers pass through
        date_header=False,
        timeout_graceful_shutdown=int(settings.shutdown_grace + settings.teardown_timeout) + 5,
    )
