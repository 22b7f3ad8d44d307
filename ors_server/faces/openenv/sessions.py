"""The OpenEnv face's sessions: the sessions its sockets drive and the throw-away ones of its stateless routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.types import Scope

from ors_server import ids
from ors_server.calls import Calls
from ors_server.environment import Environment
from ors_server.episode import State
from ors_server.errors import BadRequest, NotFound, OrsError, SessionDeleted
from ors_server.faces import env_of
from ors_server.faces.openenv.wire import CREATED_BY, FrameError, ResetRequest, unknown_session
from ors_server.registry import Registry
from ors_server.sessions import Session, SessionStore
from ors_server.settings import Settings


@dataclass
class Socket:
    """One connected `/ws` socket and the session it drives."""

    session: Session
    owned: bool
    """The socket opened the session, so the session ends with the socket."""
    idle: anyio.CancelScope | None = None
    """Set while the socket waits for its next frame: cancelled when the session ends elsewhere."""
    ended: bool = False


class OpenEnvFace:
    """The face's sessions over the shared store, for its three transports: which socket drives which session,
    and the sessions a transport opens for itself (`one_off`)."""

    def __init__(self, registry: Registry, store: SessionStore, calls: Calls, settings: Settings) -> None:
        self.registry, self.store, self.calls, self.settings = registry, store, calls, settings
        self.sockets: dict[str, Socket] = {}
        self.close_on_detach: set[str] = set()
        """Sessions `openenv/session/close` asked to end while a socket was attached: they end with it."""
        store.on_end.append(self._ended)

    @asynccontextmanager
    async def run(self) -> AsyncIterator[OpenEnvFace]:
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(self._keep_connected_alive)
            try:
                yield self
            finally:
                task_group.cancel_scope.cancel()

    async def _keep_connected_alive(self) -> None:
        # A connected socket is activity even when it is quiet: refresh its session more often than the reaper
        # looks, so only sessions without a live peer (ping timeouts close those sockets) are ever reaped.
        while True:
            await anyio.sleep(min(5.0, self.settings.session_timeout / 4))
            for socket in list(self.sockets.values()):
                socket.session.touch()

    def new_id(self) -> str:
        # Behind a front, the id names this worker, so the front routes `?session_id=` and ORS requests to it.
        return ids.mint(self.settings.worker_tag)

    def env_of(self, scope: Scope, env_name: str | None) -> type[Environment]:
        return env_of(self.registry, scope, env_name)

    async def open_socket(
        self,
        env_cls: type[Environment],
        requested: str | None,
        path_env: str | None,
        labels: dict[str, str] | None = None,
    ) -> Socket:
        """The session a new socket drives: a new one (with `labels`), or the live session `requested` (attached,
        not owned)."""
        if requested is None:
            session, _ = await self.store.open(self.new_id(), env_cls, config={}, created_by=CREATED_BY, labels=labels)
            socket = Socket(session, owned=True)
        else:
            try:
                session = self.store.get(self.store.check_id(requested), path_env)
            except BadRequest as exc:
                raise FrameError("SESSION_ERROR", exc.message) from None
            except (NotFound, SessionDeleted) as exc:
                raise FrameError("SESSION_ERROR", unknown_session(requested, exc)) from None
            if session.id in self.sockets:
                raise FrameError("SESSION_ERROR", f"Session {session.id} already has an attached WebSocket")
            socket = Socket(session, owned=False)
        self.sockets[session.id] = socket
        return socket

    async def close_socket(self, socket: Socket) -> None:
        """The socket is gone: detach it, and end its session if the socket owned it or a close was asked for."""
        session = socket.session
        if self.sockets.get(session.id) is socket:
            del self.sockets[session.id]
        if socket.owned or session.id in self.close_on_detach:
            self.close_on_detach.discard(session.id)
            if self.current(session):
                await self.store.discard(session.id, "deleted")

    def _ended(self, session: Session, how: str) -> None:
        self.close_on_detach.discard(session.id)
        socket = self.sockets.get(session.id)
        if socket is not None and socket.session is session:
            socket.ended = True
            if socket.idle is not None:
                socket.idle.cancel()

    def current(self, session: Session) -> bool:
        """Whether `session` is still the live session under its id (refreshing its idle timer)."""
        try:
            return self.store.get(session.id) is session
        except OrsError:
            return False

    async def reset(self, session: Session, request: ResetRequest) -> None:
        """A new episode in `session`: its task from the request's seed and task form, else the session's own
        (a seed alone reseeds a session made from an explicit task spec). A task the environment cannot make is
        refused before the current episode is touched."""
        config = request.config() or (None if request.seed is None or session.config is not None else {})
        await self.store.reset(session, request.seed, config)
        if session.state is State.SETUP_FAILED:
            raise session.episode.setup_failure()
        if session.state is State.DELETED:
            raise SessionDeleted()

    async def one_off(self, env_cls: type[Environment], use: Any, seed: int | None = None, config: Any = None) -> Any:
        """`await use(session)` in a new session of `env_cls` that ends right after (OpenEnv's stateless routes)."""
        session, _ = await self.store.open(
            self.new_id(), env_cls, seed=seed, config=config or {}, created_by=CREATED_BY
        )
        try:
            return await use(await self.store.get_ready(session.id))
        finally:
            with anyio.CancelScope(shield=True):
                await self.store.discard(session.id, "deleted")
