"""Session binding: which episode of the store each MCP request plays, in both protocol eras.

2025 era: a transport session (the `mcp-session-id` the SDK mints at `initialize`) is bound to one session of the
store while its `initialize` is answered (`open`, `bind`, `opened`), and plays that session (that object: not a
later one that reuses its key) until the transport closes. An MCP-created episode ends with the last transport
bound to it (`close`; `sweep_forever` applies the SDK's idle rule to the bindings). 2026-07-28 era: there is no
protocol session, and each request names its episode itself (its episode URL, else `X-Session-ID`).
`session_for` finds the episode a handler's request plays, in either era (see the package docstring).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Scope

from ors_server.environment import Environment
from ors_server.errors import (
    BadRequest,
    OrsError,
    Refused,
    SessionDeleted,
    SessionExpired,
    SessionNotFound,
    TooManyTransports,
)
from ors_server.faces import env_of
from ors_server.faces.mcp.wire import KEY_HEADER, SESSION_HEADER
from ors_server.faces.tagging import public_id
from ors_server.ids import WorkerTag
from ors_server.records.labels import HEADER as LABELS_HEADER
from ors_server.records.labels import checked, merged
from ors_server.records.labels import parse_header as parse_labels
from ors_server.registry import Registry
from ors_server.sessions import Ending, Session, SessionStore
from ors_server.settings import Settings


@dataclass
class Binding:
    """One MCP transport session and the episode it drives (that session object: not a later one that reuses its
    key)."""

    session: Session
    in_flight: int = 0
    last_seen: float = field(default_factory=anyio.current_time)
    deleting: bool = False
    """A DELETE of the transport is under way: requests it cuts short are answered 404, not the SDK's 500."""
    version: str | None = None
    """The protocol version its `initialize` negotiated (None if unread): plain calls are answered for it."""
    plain_calls: set[anyio.CancelScope] = field(default_factory=set)
    """The waits of plain calls answered without the SDK (`plain_call`): cut short when the transport ends."""


@dataclass
class Opening:
    """An `initialize` being answered: the episode it names, or (naming none) the task of the episode the transport
    id the SDK mints will name."""

    env_cls: type[Environment]
    seed: int | None
    config: dict[str, Any]
    labels: dict[str, str]
    key: str | None = None
    """The store key it names, counted in `Bindings.opening` until the answer is sent."""
    session: Session | None = None
    created: bool = False
    admitted: Session | None = None
    """The session it holds a place of under the per-session cap of transports, until the answer is sent."""
    task: dict[str, Any] | None = None
    bound: list[str] = field(default_factory=list)
    """The transport ids bound by the answer."""


class Bindings:
    """The map from MCP transport ids to sessions of the store, and nothing else about episodes."""

    def __init__(self, registry: Registry, store: SessionStore, settings: Settings, tag: WorkerTag | None) -> None:
        self.registry, self.store, self.settings, self.tag = registry, store, settings, tag
        self._bindings: dict[str, Binding] = {}
        self._opening: Counter[str] = Counter()
        """Keys with an `initialize` in progress: a transport closing meanwhile must not end their episode."""
        self._admitted: Counter[str] = Counter()
        """Session ids with an `initialize` admitted under the per-session cap but not yet bound."""
        store.on_end.append(self._forget_session)

    def key_for(self, transport_id: str) -> str | None:
        """The store key an MCP transport session is bound to (the control plane accepts transport ids)."""
        binding = self._bindings.get(transport_id)
        return binding.session.id if binding else None

    def get(self, transport_id: str) -> Binding | None:
        return self._bindings.get(transport_id)

    # Opening: an `initialize` binds the transport id of its answer.

    async def open(self, scope: Scope, message: dict[str, Any], env_cls: type[Environment]) -> Opening:
        """The episode an `initialize` names (created, attached, or restarted for a row run again), or the task of
        a fresh one; an OrsError if it cannot be opened. `opened` must follow, once the answer is sent."""
        extra = _object(_object(_object(message.get("params")).get("clientInfo")).get("_extra"))
        named = path_key(scope) or extra.get("session_id") or Headers(scope=scope).get(KEY_HEADER)
        seed = _int_or_none(extra.get("seed"), "clientInfo._extra.seed")
        config = extra.get("config") or {}
        if not isinstance(config, dict):
            raise BadRequest("clientInfo._extra.config must be an object")
        labels = merged(
            parse_labels(Headers(scope=scope).get(LABELS_HEADER)),
            checked(extra.get("labels") or {}, "clientInfo._extra.labels"),
        )
        opening = Opening(env_cls, seed, config, labels)
        if named is None:
            # The key is the transport id the SDK mints while answering: the session is created then (`bind`).
            opening.task = await self.store.task_for(env_cls, opening.seed, config)
            return opening
        key = self.store.check_id(str(named).strip())
        self._opening[key] += 1
        opening.key = key
        try:
            session, opening.created = await self.store.open(
                key, env_cls, seed=opening.seed, config=config, created_by="mcp", labels=labels
            )
            opening.session = session
            opening.admitted = self._admit(session)
            if not opening.created and session.created_by == "mcp" and (session.step_count or session.finished):
                # The same row run again: a fresh episode, identical to the first (same seed, same config).
                await self.store.reset(session, opening.seed if "seed" in extra else session.seed)
        except OrsError:
            await self.opened(opening)
            raise
        return opening

    def bind(self, opening: Opening, transport_id: str) -> None:
        """Bind the transport id the SDK minted for `opening` (creating its session if it names none yet); an
        OrsError if the store cannot take the session now."""
        if opening.session is None:
            opening.session = self.store.create(
                transport_id,
                opening.env_cls,
                opening.task or {},
                seed=opening.seed,
                config=opening.config,
                created_by="mcp",
                labels=opening.labels,
            )
        self._bindings[transport_id] = Binding(opening.session)
        opening.bound.append(transport_id)

    async def opened(self, opening: Opening) -> None:
        """The `initialize` is answered (or refused): an episode it created but bound no transport to ends."""
        key = opening.key
        if key is not None and key in self._opening:
            self._opening[key] -= 1
            if not self._opening[key]:
                del self._opening[key]
            opening.key = None
        if opening.admitted is not None:
            self._admitted[opening.admitted.id] -= 1
            if not self._admitted[opening.admitted.id]:
                del self._admitted[opening.admitted.id]
            opening.admitted = None
        if opening.created and not opening.bound and opening.session is not None:
            with anyio.CancelScope(shield=True):
                await self.end(opening.session, "reaped")

    def _admit(self, session: Session) -> Session:
        """Count one more transport for `session`, or refuse it: the manager's cap (`max_sessions`) counts
        transports, so without this one episode's clients could take every slot."""
        limit = self.settings.max_mcp_transports_per_session
        bound = sum(1 for binding in self._bindings.values() if binding.session is session)
        if bound + self._admitted[session.id] >= limit:
            raise TooManyTransports(session.id, limit)
        self._admitted[session.id] += 1
        return session

    # Closing.

    async def close(self, transport_id: str, how: Ending) -> None:
        """A transport ended (DELETE, idle, or unknown to the manager): end its episode if nobody else uses it."""
        binding = self._bindings.pop(transport_id, None)
        if binding is None:
            return
        for waiting in binding.plain_calls:
            waiting.cancel()
        session = binding.session
        if session.created_by != "mcp" or session.id in self._opening:
            return
        if any(b.session is session for b in self._bindings.values()):
            return
        await self.end(session, how)

    async def end(self, session: Session, how: Ending) -> None:
        if self.current(session):
            await self.store.discard(session.id, how)

    def current(self, session: Session) -> bool:
        """Whether `session` is still live in the store (refreshing its idle timer), not replaced under its key."""
        try:
            return self.store.get(session.id) is session
        except OrsError:
            return False

    def _forget_session(self, session: Session, how: str) -> None:
        for transport_id in [t for t, b in self._bindings.items() if b.session is session]:
            del self._bindings[transport_id]

    async def sweep_forever(self) -> None:
        # The manager closes a transport after `session_timeout` with no request in flight; it offers no hook,
        # so the same rule is applied here to the bindings (in-flight requests are counted by `Transports.forward`).
        timeout = self.settings.session_timeout
        while True:
            await anyio.sleep(min(5.0, timeout / 4))
            horizon = anyio.current_time() - timeout
            for transport_id, binding in list(self._bindings.items()):
                if not binding.in_flight and binding.last_seen < horizon:
                    await self.close(transport_id, "reaped")

    # The episode a handler's request plays.

    def of_request(self, request: Request | None) -> tuple[str | None, Binding | None]:
        """A request's transport id (as clients see it) and the binding of that transport, if it is bound."""
        transport_id = public_id(self.tag, request.headers.get(SESSION_HEADER) if request is not None else None)
        return transport_id, self._bindings.get(transport_id) if transport_id else None

    def path_env(self, request: Request | None) -> type[Environment]:
        """The environment a request's URL names (for `/mcp`, its port's, else the server's first: `env_of`)."""
        if request is None:
            return self.registry.get(None)
        return env_of(self.registry, request.scope, request.path_params.get("env"))

    async def session_for(self, request: Request | None) -> Session:
        """The live episode a handler's request plays: its transport's, else (2026-07-28) the one it names.
        NoEpisode if there is none; Unnamed if a sessionless request names none."""
        transport_id, binding = self.of_request(request)
        if binding is not None:
            return await self.bound_session(binding)
        if transport_id is not None:
            raise ended()
        # A sessionless (2026-07-28) request: it can only drive a session it names.
        named = named_key(request)
        if not named:
            raise Unnamed(_how_to_name(self.path_env(request).name, request))
        try:
            key = self.store.check_id(named)
        except OrsError as exc:
            raise NoEpisode(exc.message) from None
        try:
            return await self.store.get_ready(key, self.path_env(request).name)
        except SessionExpired as exc:
            raise NoEpisode(_expired(f"Session {key}", exc)) from None
        except (SessionNotFound, SessionDeleted):
            raise NoEpisode(f"Session {key} does not exist.") from None

    async def bound_session(self, binding: Binding) -> Session:
        """The live episode of a transport: its own session, not a later one that reuses the key."""
        try:
            session = await self.store.get_ready(binding.session.id, None)
        except SessionExpired as exc:
            raise NoEpisode(_expired("This MCP session's episode", exc)) from None
        except (SessionNotFound, SessionDeleted):
            raise ended() from None
        if session is not binding.session:
            raise ended()
        return session


class NoEpisode(Exception):
    """A request that names no live episode (a tool call renders it as an isError result)."""


class Unnamed(NoEpisode):
    """A sessionless (2026-07-28) request that names no episode at all (a JSON-RPC error for `tools/call`)."""


def ended() -> NoEpisode:
    return NoEpisode("This MCP session's episode has ended: initialize a new MCP session.")


def deleted_while_running() -> Refused:
    # The SDK answers a request whose transport a DELETE terminated with a 500 and no id; it is the client's own
    # doing, so it gets what every later request of the transport gets: a 404.
    return Refused(404, "Session terminated: the MCP session was deleted while this request ran")


def _expired(whose: str, exc: SessionExpired) -> str:
    return f"{whose} expired after {exc.timeout:g} s of inactivity: initialize a new MCP session."


def path_key(scope: Scope) -> str | None:
    """The session id an episode URL (`/{env}/mcp/episodes/{session_id}`) names, if this is one."""
    named = scope.get("path_params", {}).get("session_id")
    return named.strip() or None if isinstance(named, str) else None


def named_key(request: Request | None) -> str | None:
    """The episode a request without a transport names: its episode URL, else its `X-Session-ID` header."""
    if request is None:
        return None
    return path_key(request.scope) or (request.headers.get(KEY_HEADER) or "").strip() or None


def _how_to_name(env_name: str, request: Request | None) -> str:
    default = request is not None and "env" not in request.path_params
    url = "/mcp/episodes/<session_id>" if default else f"/{env_name}/mcp/episodes/<session_id>"
    return (
        f"No episode named: this request (MCP 2026-07-28, without a protocol session) must name the episode it "
        f"acts on. Use the episode URL {url} (the session_id of a session created with ORS /create or on any "
        "other face), or send the X-Session-ID header with that id; or connect with the initialize handshake "
        "(mcp 2.x: Client(url) in its default mode), which starts an episode of its own."
    )


def _object(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (for reading optional fields of a raw request)."""
    return value if isinstance(value, dict) else {}


def _int_or_none(value: Any, what: str) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise BadRequest(f"{what} must be an integer or null")
