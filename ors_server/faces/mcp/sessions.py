"""The MCP face's session binding and handlers: `McpFace` binds each MCP transport (or current-era request) to a
session of the store, ends the sessions MCP made when their transports close, and answers the SDK's requests
(tools, calls with progress, the task prompt and resource) over the call pipeline (see the package docstring)."""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import Any

import anyio
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ors_server.calls import CallResult, Calls
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
from ors_server.faces import Core, Face, env_of, wirejson
from ors_server.faces.mcp.naming import names_session
from ors_server.faces.mcp.plain_call import answer, negotiated_version, plain_call
from ors_server.faces.mcp.transport import (
    Endpoint,
    parsed,
    read_body,
    replay,
    request_id_of,
    routes,
    security,
    send_error,
)
from ors_server.faces.mcp.wire import (
    EPISODE_SCOPE_KEY,
    KEY_HEADER,
    SESSION_HEADER,
    STREAMED_SCOPE_KEY,
    TASK_PROMPT,
    TASK_RESOURCE,
    content_block,
    error_result,
    render,
    render_error,
    tool_list,
)
from ors_server.faces.progress import ProgressFeed
from ors_server.faces.tagging import public_id, tagged_transport
from ors_server.ids import split, worker_tag
from ors_server.internals import hold_idle, sdk_transport
from ors_server.records.labels import HEADER as LABELS_HEADER
from ors_server.records.labels import checked, merged
from ors_server.records.labels import parse_header as parse_labels
from ors_server.registry import Registry
from ors_server.sessions import Ending, Session, SessionStore
from ors_server.settings import Settings
from ors_server.types import Blocks, ImageBlock, TextBlock

logger = logging.getLogger("ors_server.mcp")


@dataclass
class _Binding:
    """One MCP transport session and the episode it drives (that session object: not a later one that
    reuses its key)."""

    session: Session
    in_flight: int = 0
    last_seen: float = field(default_factory=anyio.current_time)
    deleting: bool = False
    """A DELETE of the transport is under way: requests it cuts short are answered 404, not the SDK's 500."""
    version: str | None = None
    """The protocol version its `initialize` negotiated (None if unread): plain calls are answered for it."""
    plain_calls: set[anyio.CancelScope] = field(default_factory=set)
    """The waits of plain calls answered without the SDK (`plain_call`): cut short when the transport ends."""


def _no_header_parameters(name: str) -> None:
    return None


def _server_version() -> str:
    try:
        return dist_version("ors-server")
    except PackageNotFoundError:
        return "0"


def _object(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (for reading optional fields of a raw request)."""
    return value if isinstance(value, dict) else {}


def _int_or_none(value: Any, what: str) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise BadRequest(f"{what} must be an integer or null")


class McpFace:
    """The MCP endpoint of every environment, over the shared session store."""

    answers_plain_calls = True
    """Answer plain `tools/call`s of 2025 protocol sessions without the SDK's transport (`plain_call`)."""

    def __init__(self, registry: Registry, store: SessionStore, calls: Calls, settings: Settings) -> None:
        self.registry, self.store, self.calls, self.settings = registry, store, calls, settings
        self.server: Server[Any] = Server(
            "ors-server",
            version=_server_version(),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
        )
        self.server.middleware.append(self._instructions)
        self.server.add_request_handler("server/discover", types.RequestParams, self._discover)
        # No tool declares `x-mcp-header` parameters, so there are no `Mcp-Param-*` headers to check: without
        # this the SDK would list the tools again (setting an episode up) before every 2026-07-28 tools/call.
        self.server.get_tool_input_schema = _no_header_parameters

        def manager(*, json_response: bool, stateless: bool = False) -> StreamableHTTPSessionManager:
            return StreamableHTTPSessionManager(
                app=self.server,
                json_response=json_response,
                stateless=stateless,
                security_settings=security(),
                session_idle_timeout=settings.session_timeout,
                max_request_body_size=settings.max_body_bytes,
                max_sessions=settings.max_sessions,
            )

        self.manager = manager(json_response=True)
        # A 2026-07-28 request that asks for progress (`_meta.progressToken`, and accepts SSE) is answered by
        # the SDK's SSE mode instead: JSON still if the handler sends nothing before it ends, else an event
        # stream with the notifications, then the result. It keeps no protocol sessions of its own.
        self.streaming_manager = manager(json_response=False)
        # A request of a 2025 protocol session that asks for progress the same way is answered by a stateless SSE
        # transport of its own: the session's transport answers in JSON, which has no room for notifications.
        # Our handlers find the episode by the request's `mcp-session-id` (`_binding`), not by the SDK session.
        self.session_streaming_manager = manager(json_response=False, stateless=True)
        # Behind a front, transport ids carry the worker's tag (the SDK mints them untagged).
        self.tag = worker_tag(settings.worker_tag)
        self.transport = tagged_transport(self.manager.handle_request, self.tag)
        self.streaming = tagged_transport(self.streaming_manager.handle_request, self.tag)
        self._bindings: dict[str, _Binding] = {}
        self._opening: Counter[str] = Counter()
        """Keys with an `initialize` in progress: a transport closing meanwhile must not end their episode."""
        self._admitted: Counter[str] = Counter()
        """Session ids with an `initialize` admitted under the per-session cap but not yet bound."""
        store.on_end.append(self._forget_key)

    # Wiring.

    def routes(self) -> list[BaseRoute]:
        return routes(Endpoint(self))

    @asynccontextmanager
    async def run(self) -> AsyncIterator[McpFace]:
        async with (
            self.manager.run(),
            self.streaming_manager.run(),
            self.session_streaming_manager.run(),
            anyio.create_task_group() as task_group,
        ):
            task_group.start_soon(self._sweep_forever)
            try:
                yield self
            finally:
                task_group.cancel_scope.cancel()

    def key_for(self, transport_id: str) -> str | None:
        """The store key an MCP transport session is bound to (the control plane accepts transport ids)."""
        binding = self._bindings.get(transport_id)
        return binding.session.id if binding else None

    # Opening and closing transports.

    async def open(self, scope: Scope, receive: Receive, send: Send, env_cls: type[Environment]) -> None:
        """A POST without a transport id: an `initialize` (or a sessionless 2026-07-28 request)."""
        body = await read_body(receive)
        try:
            message = wirejson.loads(body)
        except wirejson.MalformedJson:
            message = None  # the transport answers the parse error
        if not (isinstance(message, dict) and message.get("method") == "initialize"):
            transport = self.transport
            if _wants_progress(message, scope):
                transport, scope[STREAMED_SCOPE_KEY] = self.streaming, True
            await transport(scope, replay(body, receive), send)
            return
        extra = _object(_object(_object(message.get("params")).get("clientInfo")).get("_extra"))
        admitted: Session | None = None
        try:
            key = _path_key(scope) or extra.get("session_id") or Headers(scope=scope).get(KEY_HEADER)
            seed = _int_or_none(extra.get("seed"), "clientInfo._extra.seed")
            config = extra.get("config") or {}
            if not isinstance(config, dict):
                raise BadRequest("clientInfo._extra.config must be an object")
            labels = merged(
                parse_labels(Headers(scope=scope).get(LABELS_HEADER)),
                checked(extra.get("labels") or {}, "clientInfo._extra.labels"),
            )
            session: Session | None = None
            created = False
            if key is not None:
                key = self.store.check_id(str(key).strip())
                self._opening[key] += 1
                session, created = await self.store.open(
                    key, env_cls, seed=seed, config=config, created_by="mcp", labels=labels
                )
                admitted = self._admit(session)
                if not created and session.created_by == "mcp" and (session.step_count or session.finished):
                    # The same row run again: a fresh episode, identical to the first (same seed, same config).
                    await self.store.reset(session, seed if "seed" in extra else session.seed)
                task = None
            else:
                # The key is the transport id the SDK mints while answering: the session is created then.
                task = await self.store.task_for(env_cls, seed, config)
        except OrsError as exc:
            self._done_opening(key)
            self._done_admitting(admitted)
            await send_error(scope, send, exc, message.get("id"))
            return

        if session is not None:
            scope[EPISODE_SCOPE_KEY] = session
        bound: list[str] = []
        replaced = False

        async def bind(reply: Message) -> None:
            nonlocal session, replaced
            if replaced:
                return
            if reply["type"] == "http.response.start" and reply["status"] < 400:
                transport_id = Headers(raw=reply.get("headers") or []).get(SESSION_HEADER)
                if transport_id:
                    if session is None:
                        try:
                            session = self.store.create(
                                transport_id,
                                env_cls,
                                task or {},
                                seed=seed,
                                config=config,
                                created_by="mcp",
                                labels=labels,
                            )
                        except OrsError as exc:
                            # Lost a race for the last slot: refuse; the unbound transport idles out.
                            replaced = True
                            await send_error(scope, send, exc, message.get("id"))
                            return
                    self._bindings[transport_id] = _Binding(session)
                    bound.append(transport_id)
            elif reply["type"] == "http.response.body" and bound and not reply.get("more_body", False):
                binding = self._bindings.get(bound[-1])
                if binding is not None and binding.version is None:
                    binding.version = negotiated_version(reply.get("body", b""))
            await send(reply)

        try:
            await self.transport(scope, replay(body, receive), bind)
        finally:
            self._done_opening(key)
            self._done_admitting(admitted)
            if created and not bound and session is not None:
                with anyio.CancelScope(shield=True):
                    await self._end(session, "reaped")

    def _admit(self, session: Session) -> Session:
        """Count one more transport for `session`, or refuse it: the manager's cap (`max_sessions`) counts
        transports, so without this one episode's clients could take every slot."""
        limit = self.settings.max_mcp_transports_per_session
        bound = sum(1 for binding in self._bindings.values() if binding.session is session)
        if bound + self._admitted[session.id] >= limit:
            raise TooManyTransports(session.id, limit)
        self._admitted[session.id] += 1
        return session

    def _done_admitting(self, session: Session | None) -> None:
        if session is not None:
            self._admitted[session.id] -= 1
            if not self._admitted[session.id]:
                del self._admitted[session.id]

    def _done_opening(self, key: str | None) -> None:
        if key is not None and key in self._opening:
            self._opening[key] -= 1
            if not self._opening[key]:
                del self._opening[key]

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
        await self._end(session, how)

    async def _end(self, session: Session, how: Ending) -> None:
        if self._current(session):
            await self.store.discard(session.id, how)

    def _current(self, session: Session) -> bool:
        """Whether `session` is still live in the store (refreshing its idle timer), not replaced under its key."""
        try:
            return self.store.get(session.id) is session
        except OrsError:
            return False

    def _forget_key(self, session: Session, how: str) -> None:
        for transport_id in [t for t, b in self._bindings.items() if b.session is session]:
            del self._bindings[transport_id]

    async def _sweep_forever(self) -> None:
        # The manager closes a transport after `session_timeout` with no request in flight; it offers no hook,
        # so the same rule is applied here to the bindings (in-flight requests are counted by `_Endpoint`).
        timeout = self.settings.session_timeout
        while True:
            await anyio.sleep(min(5.0, timeout / 4))
            horizon = anyio.current_time() - timeout
            for transport_id, binding in list(self._bindings.items()):
                if not binding.in_flight and binding.last_seen < horizon:
                    await self.close(transport_id, "reaped")

    async def forward(
        self, scope: Scope, receive: Receive, send: Send, transport_id: str, env_cls: type[Environment]
    ) -> None:
        """A request of an existing transport: track it, refresh its episode, and end it on DELETE."""
        binding = self._bindings.get(transport_id)
        if binding is not None and binding.session.env_cls is not env_cls:
            raise Refused(404, "Session not found")  # a transport belongs to its endpoint
        named = _path_key(scope)
        if binding is not None and named is not None and binding.session.id != named:
            raise Refused(404, "Session not found")  # ... and to the episode its URL names
        deleting = scope["method"] == "DELETE"
        if binding is not None:
            binding.in_flight += 1
            binding.deleting = binding.deleting or deleting
            self._current(binding.session)  # refreshes the episode's idle timer
        status = 0
        body: list[bytes] = []
        cut = False
        transport = self.transport
        if binding is not None and scope["method"] == "POST":
            whole = await read_body(receive)
            receive = replay(whole, receive)
            if b"progressToken" in whole and _wants_progress(parsed(whole), scope):
                transport, scope[STREAMED_SCOPE_KEY] = self.session_streaming_manager.handle_request, True
            else:
                transport = self._plain_call(scope, whole, binding, transport_id) or transport

        async def read() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.append(message.get("body", b""))  # for the id of a request the DELETE cuts short
            return message

        async def watch(reply: Message) -> None:
            nonlocal status, cut
            if reply["type"] == "http.response.start":
                status = reply["status"]
                # A request whose transport a DELETE terminated (`_deleted_while_running`).
                cut = status == 500 and binding is not None and binding.deleting and not deleting
            if not cut:
                await send(reply)
            elif not reply.get("more_body", False) and reply["type"] == "http.response.body":
                await send_error(scope, send, _deleted_while_running(), request_id_of(b"".join(body)))

        try:
            await transport(scope, read, watch)
        except anyio.ClosedResourceError:
            # The transport was closed (a DELETE) while this request was in flight.
            if status == 0:
                await send_error(scope, send, Refused(404, "Session not found"))
        finally:
            if binding is not None:
                binding.in_flight -= 1
                binding.last_seen = anyio.current_time()
                if deleting and not 200 <= status < 300:
                    binding.deleting = False  # the DELETE was refused: the transport lives on
        if binding is not None and (status == 404 or (scope["method"] == "DELETE" and 200 <= status < 300)):
            with anyio.CancelScope(shield=True):
                await self.close(transport_id, "deleted" if status != 404 else "reaped")

    def _plain_call(self, scope: Scope, body: bytes, binding: _Binding, transport_id: str) -> ASGIApp | None:
        """An answerer for `body` if it is a plain `tools/call` of this live transport (`plain_call`)."""
        if not self.answers_plain_calls:
            return None
        call = plain_call(Request(scope), body, binding.version)
        if call is None:
            return None
        found = split(transport_id) if self.tag is not None else None
        sdk_id = found[1] if found is not None and found[0] == self.tag else transport_id
        sdk = sdk_transport(self.manager, sdk_id)
        if sdk is None or sdk.is_terminated or (sdk.idle_scope is not None and sdk.idle_scope.cancel_called):
            return None

        async def answerer(scope: Scope, receive: Receive, send: Send) -> None:
            shown = binding.session.redact(call.params.name)
            scope.setdefault("state", {})["tool"] = shown  # for the access log
            result = None
            with hold_idle(sdk), anyio.CancelScope() as waiting:
                binding.plain_calls.add(waiting)  # `close` cancels it, as the SDK ends its requests at a DELETE
                try:
                    result = await self._tool_result(
                        call.params, shown, lambda: self._bound_session(binding), self._runner(call.params)
                    )
                finally:
                    binding.plain_calls.discard(waiting)
            if result is None:
                await send_error(scope, send, _deleted_while_running(), call.request_id)
            else:
                await answer(call, result, transport_id)(scope, receive, send)

        return answerer

    def _runner(self, params: types.CallToolRequestParams) -> Callable[[Session], Awaitable[CallResult]]:
        """What runs the call in the episode it is given (no progress reports)."""
        return lambda session: self.calls.call(session, params.name, params.arguments, face="mcp")

    # MCP handlers.

    async def _instructions(self, ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        """Add the episode's task statement to an `initialize` result, when `open` named the episode."""
        result = await call_next(ctx)
        request = ctx.request
        session = request.scope.get(EPISODE_SCOPE_KEY) if ctx.method == "initialize" and request else None
        if isinstance(session, Session) and isinstance(result, dict):
            text = await self._task_text(session)
            if text:
                result["instructions"] = text
        return result

    async def _task_text(self, session: Session) -> str | None:
        """The text of the episode's prompt, or None if it is not ready within `ready_wait` or cannot be read.
        The handshake must not fail for it: the prompt `task` is there to read it later."""
        with anyio.move_on_after(self.settings.ready_wait):
            try:
                if await self.store.get_ready(session.id) is session:
                    blocks = await self.store.read_prompt(session)
                    return "\n".join(block.text for block in blocks if isinstance(block, TextBlock)) or None
            except OrsError as exc:
                logger.info("no instructions at initialize: %s", exc.message, extra={"session_id": session.id})
        return None

    def _binding(self, ctx: ServerRequestContext[Any, Any]) -> tuple[str | None, _Binding | None]:
        request = ctx.request
        transport_id = public_id(self.tag, request.headers.get(SESSION_HEADER) if request is not None else None)
        return transport_id, self._bindings.get(transport_id) if transport_id else None

    def _path_env(self, ctx: ServerRequestContext[Any, Any]) -> type[Environment]:
        request = ctx.request
        if request is None:
            return self.registry.get(None)
        return env_of(self.registry, request.scope, request.path_params.get("env"))

    async def _discover(self, ctx: ServerRequestContext[Any, Any], params: types.RequestParams) -> types.DiscoverResult:
        """`server/discover`: 2026-07-28 where the request names an episode (its URL or `X-Session-ID`), else only
        the handshake's versions, which clients in their default mode (mcp, fastmcp, the TypeScript SDK) read as a
        legacy server and answer with `initialize`: on a URL naming no episode the current era could run no call,
        while the handshake starts an episode of its own, as it did before discovery was answered."""
        versions = MODERN_PROTOCOL_VERSIONS if _named_key(ctx) else HANDSHAKE_PROTOCOL_VERSIONS
        capabilities = self.server.get_capabilities(protocol_version=ctx.protocol_version)
        return types.DiscoverResult(supported_versions=list(versions), capabilities=capabilities)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        transport_id, binding = self._binding(ctx)
        session = binding.session if binding is not None else None
        if transport_id is None and _named_key(ctx) is not None:
            # A sessionless request on an episode URL (or with X-Session-ID): that episode's tools, if it is live.
            try:
                session = await self._session_for(ctx)
            except _NoEpisode:
                session = None
        try:
            if session is not None:
                listed = await self.calls.tools(session.env_cls, session)
            else:
                listed = await self.calls.tools(self._path_env(ctx))
        except OrsError as exc:  # a composed tool server that did not answer
            raise MCPError(code=types.INTERNAL_ERROR, message=exc.message) from None
        return types.ListToolsResult(tools=tool_list(listed))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # The name may be any string, a secret value of the session too: it is shown (and logged) masked.
        _, binding = self._binding(ctx)
        shown = binding.session.redact(params.name) if binding is not None else params.name
        if ctx.request is not None:  # for the access log
            ctx.request.state.tool = shown
        token = _progress_token(ctx)
        run = self._runner(params)
        if token is not None:
            run = functools.partial(self._call_with_progress, ctx, params=params, token=token)
        return await self._tool_result(params, shown, lambda: self._session_for(ctx), run)

    async def _tool_result(
        self,
        params: types.CallToolRequestParams,
        shown: str,
        session_for: Callable[[], Awaitable[Session]],
        run: Callable[[Session], Awaitable[CallResult]],
    ) -> types.CallToolResult:
        """Run a call in the episode `session_for` finds, as a tool result (errors too, apart from `_Unnamed`)."""
        try:
            session = await session_for()
            shown = session.redact(params.name)
            result = await run(session)
        except _Unnamed as exc:
            # Current era: nothing names an episode, so no call can run; the error says how to name one.
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except _NoEpisode as exc:
            return error_result(str(exc))
        except OrsError as exc:
            return error_result(f"'{shown}' was not run: {exc.message}")
        except Exception:
            logger.exception("MCP tools/call failed")
            return error_result(f"'{shown}' was not run: internal server error")
        return render(shown, result)

    async def _call_with_progress(
        self,
        ctx: ServerRequestContext[Any, Any],
        session: Session,
        params: types.CallToolRequestParams,
        token: str | int,
    ) -> CallResult:
        """Run the call, forwarding its progress reports as `notifications/progress` until it ends.

        Reports come from the tool's thread, so they cross to the event loop through a `ProgressFeed`; a client
        slower than the tool loses the oldest (each is a snapshot; the result never waits for them). A 2026-07-28
        request that accepts an event stream gets them on its own response stream, in either era (see `open` and
        `forward`); one answered in JSON, on its session's standalone stream (the GET the client keeps open), where
        the client matches them by token.
        """
        feed = ProgressFeed()
        # On the request's own event stream when it is answered by one; else on the session's standalone stream.
        request = ctx.request
        streamed = request is not None and request.scope.get(STREAMED_SCOPE_KEY) is True
        related = str(ctx.request_id) if streamed and ctx.request_id is not None else None
        call = self.calls.start(session, params.name, params.arguments, face="mcp", progress=feed)
        ended = False
        while not ended:  # until the call has ended and its last reports are sent
            await feed.next_or_end(call)
            ended = call.done  # read first: the reports of an ended call are all in the feed by then
            for report in feed.take():
                try:
                    await ctx.session.send_progress_notification(
                        token, report.done, report.total, report.message, related_request_id=related
                    )
                except Exception:  # the client went away: the call goes on without its progress
                    logger.debug("progress notification not sent", exc_info=True)
                    return await call.wait()
        return await call.wait()

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[TASK_PROMPT])

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        """The bound episode's task statement (`get_prompt()`), its text and images as one user message each."""
        if params.name != TASK_PROMPT.name:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt {params.name!r}: the prompt is 'task'")
        blocks = await self._task_statement(ctx)
        messages = [types.PromptMessage(role="user", content=content_block(block)) for block in blocks]
        return types.GetPromptResult(description=TASK_PROMPT.description, messages=messages)

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[TASK_RESOURCE])

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        """The bound (or named) episode's task statement: one text content per text block, one blob per image."""
        uri = str(params.uri)
        if uri != TASK_RESOURCE.uri:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown resource {uri!r}: the resource is 'ors://task'")
        blocks = await self._task_statement(ctx)
        contents: list[types.TextResourceContents | types.BlobResourceContents] = [
            types.BlobResourceContents(uri=uri, mime_type=block.mimeType, blob=block.data)
            if isinstance(block, ImageBlock)
            else types.TextResourceContents(uri=uri, mime_type="text/plain", text=block.text)
            for block in blocks
        ]
        return types.ReadResourceResult(contents=contents)

    async def _task_statement(self, ctx: ServerRequestContext[Any, Any]) -> Blocks:
        """The bound (or named) episode's prompt blocks, for the task prompt and the task resource."""
        try:
            session = await self._session_for(ctx)
            return await self.store.read_prompt(session)
        except _NoEpisode as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except OrsError as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=exc.message) from None

    async def _session_for(self, ctx: ServerRequestContext[Any, Any]) -> Session:
        transport_id, binding = self._binding(ctx)
        if binding is not None:
            return await self._bound_session(binding)
        if transport_id is not None:
            raise _ended()
        # A sessionless (2026-07-28) request: it can only drive a session it names.
        named = _named_key(ctx)
        if not named:
            raise _Unnamed(_how_to_name(self._path_env(ctx).name, ctx))
        try:
            key = self.store.check_id(named)
        except OrsError as exc:
            raise _NoEpisode(exc.message) from None
        try:
            return await self.store.get_ready(key, self._path_env(ctx).name)
        except SessionExpired as exc:
            raise _NoEpisode(_expired(f"Session {key}", exc)) from None
        except (SessionNotFound, SessionDeleted):
            raise _NoEpisode(f"Session {key} does not exist.") from None

    async def _bound_session(self, binding: _Binding) -> Session:
        """The live episode of a transport: its own session, not a later one that reuses the key."""
        try:
            session = await self.store.get_ready(binding.session.id, None)
        except SessionExpired as exc:
            raise _NoEpisode(_expired("This MCP session's episode", exc)) from None
        except (SessionNotFound, SessionDeleted):
            raise _ended() from None
        if session is not binding.session:
            raise _ended()
        return session


def _deleted_while_running() -> Refused:
    # The SDK answers a request whose transport a DELETE terminated with a 500 and no id; it is the client's own
    # doing, so it gets what every later request of the transport gets: a 404.
    return Refused(404, "Session terminated: the MCP session was deleted while this request ran")


def _ended() -> _NoEpisode:
    return _NoEpisode("This MCP session's episode has ended: initialize a new MCP session.")


def _expired(whose: str, exc: SessionExpired) -> str:
    return f"{whose} expired after {exc.timeout:g} s of inactivity: initialize a new MCP session."


class _NoEpisode(Exception):
    """A tool call that names no live episode (rendered as an isError result)."""


class _Unnamed(_NoEpisode):
    """A sessionless (2026-07-28) request that names no episode at all (a JSON-RPC error for `tools/call`)."""


def _progress_token(ctx: ServerRequestContext[Any, Any]) -> str | int | None:
    meta = ctx.meta or {}
    token = meta.get("progress_token", meta.get("progressToken"))
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def _wants_progress(message: Any, scope: Scope) -> bool:
    """A request that carries a progress token from a client that accepts an event stream."""
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not (isinstance(meta, dict) and meta.get("progressToken") is not None):
        return False
    return "text/event-stream" in Headers(scope=scope).get("accept", "")


def _path_key(scope: Scope) -> str | None:
    """The session id an episode URL (`/{env}/mcp/episodes/{session_id}`) names, if this is one."""
    named = scope.get("path_params", {}).get("session_id")
    return named.strip() or None if isinstance(named, str) else None


def _named_key(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The episode a request without a transport names: its episode URL, else its `X-Session-ID` header."""
    request = ctx.request
    if request is None:
        return None
    return _path_key(request.scope) or (request.headers.get(KEY_HEADER) or "").strip() or None


def _how_to_name(env_name: str, ctx: ServerRequestContext[Any, Any]) -> str:
    request = ctx.request
    default = request is not None and "env" not in request.path_params
    url = "/mcp/episodes/<session_id>" if default else f"/{env_name}/mcp/episodes/<session_id>"
    return (
        f"No episode named: this request (MCP 2026-07-28, without a protocol session) must name the episode it "
        f"acts on. Use the episode URL {url} (the session_id of a session created with ORS /create or on any "
        "other face), or send the X-Session-ID header with that id; or connect with the initialize handshake "
        "(mcp 2.x: Client(url) in its default mode), which starts an episode of its own."
    )


def shape() -> Face:
    """The face's routes and error renderer, without a face behind them (what a front needs to refuse): its
    routes lead nowhere, as a front never serves them."""
    return Face("mcp", routes(Response(status_code=404)), render_error, names_session=names_session)


def face(core: Core) -> Face:
    mcp = McpFace(core.registry, core.store, core.calls, core.settings)
    core.aliases.add(mcp.key_for)  # the control plane and a front's lookups accept transport ids
    return Face("mcp", mcp.routes(), render_error, lifespan=mcp.run, state={"mcp": mcp}, names_session=names_session)
