"""The MCP face's request handlers, on the SDK's low-level `Server`: `server/discover`, `tools/list`, `tools/call`
(with progress), the task prompt and resource, and the task statement as an `initialize` result's `instructions`.
Each finds the episode its request plays through the bindings (`binding.py`) and runs over the call pipeline."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import Any

import anyio
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from ors_server.calls import CallResult, Calls
from ors_server.errors import OrsError
from ors_server.faces.mcp.binding import Bindings, NoEpisode, Unnamed, named_key
from ors_server.faces.mcp.wire import (
    EPISODE_SCOPE_KEY,
    STREAMED_SCOPE_KEY,
    TASK_PROMPT,
    TASK_RESOURCE,
    content_block,
    error_result,
    render,
    tool_list,
)
from ors_server.faces.progress import ProgressFeed
from ors_server.sessions import Session, SessionStore
from ors_server.settings import Settings
from ors_server.types import Blocks, ImageBlock, TextBlock

logger = logging.getLogger("ors_server.mcp")

Runner = Callable[[Session], Awaitable[CallResult]]
"""What runs a call in the episode it is given."""


def _no_header_parameters(name: str) -> None:
    return None


def _server_version() -> str:
    try:
        return dist_version("ors-server")
    except PackageNotFoundError:
        return "0"


class Handlers:
    """The SDK `Server` of the face (`server`), answering over the store and the call pipeline."""

    def __init__(self, store: SessionStore, calls: Calls, settings: Settings, bindings: Bindings) -> None:
        self.store, self.calls, self.settings, self.bindings = store, calls, settings, bindings
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

    # initialize and server/discover.

    async def _instructions(self, ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        """Add the episode's task statement to an `initialize` result, when its request named the episode."""
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

    async def _discover(self, ctx: ServerRequestContext[Any, Any], params: types.RequestParams) -> types.DiscoverResult:
        """`server/discover`: 2026-07-28 where the request names an episode (its URL or `X-Session-ID`), else only
        the handshake's versions, which clients in their default mode (mcp, fastmcp, the TypeScript SDK) read as a
        legacy server and answer with `initialize`: on a URL naming no episode the current era could run no call,
        while the handshake starts an episode of its own, as it did before discovery was answered."""
        versions = MODERN_PROTOCOL_VERSIONS if named_key(ctx.request) else HANDSHAKE_PROTOCOL_VERSIONS
        capabilities = self.server.get_capabilities(protocol_version=ctx.protocol_version)
        return types.DiscoverResult(supported_versions=list(versions), capabilities=capabilities)

    # Tools.

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        transport_id, binding = self.bindings.of_request(ctx.request)
        session = binding.session if binding is not None else None
        if transport_id is None and named_key(ctx.request) is not None:
            # A sessionless request on an episode URL (or with X-Session-ID): that episode's tools, if it is live.
            try:
                session = await self.bindings.session_for(ctx.request)
            except NoEpisode:
                session = None
        try:
            if session is not None:
                listed = await self.calls.tools(session.env_cls, session)
            else:
                listed = await self.calls.tools(self.bindings.path_env(ctx.request))
        except OrsError as exc:  # a composed tool server that did not answer
            raise MCPError(code=types.INTERNAL_ERROR, message=exc.message) from None
        return types.ListToolsResult(tools=tool_list(listed))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # The name may be any string, a secret value of the session too: it is shown (and logged) masked.
        _, binding = self.bindings.of_request(ctx.request)
        shown = binding.session.redact(params.name) if binding is not None else params.name
        if ctx.request is not None:  # for the access log
            ctx.request.state.tool = shown
        token = _progress_token(ctx)
        run = self.runner(params)
        if token is not None:
            run = functools.partial(self._call_with_progress, ctx, params=params, token=token)
        return await self.tool_result(params, shown, lambda: self.bindings.session_for(ctx.request), run)

    def runner(self, params: types.CallToolRequestParams) -> Runner:
        """What runs the call in the episode it is given (no progress reports)."""
        return lambda session: self.calls.call(session, params.name, params.arguments, face="mcp")

    async def tool_result(
        self,
        params: types.CallToolRequestParams,
        shown: str,
        session_for: Callable[[], Awaitable[Session]],
        run: Runner,
    ) -> types.CallToolResult:
        """Run a call in the episode `session_for` finds, as a tool result (errors too, apart from `Unnamed`)."""
        try:
            session = await session_for()
            shown = session.redact(params.name)
            result = await run(session)
        except Unnamed as exc:
            # Current era: nothing names an episode, so no call can run; the error says how to name one.
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except NoEpisode as exc:
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
        slower than the tool loses the oldest (each is a snapshot; the result never waits for them). A request
        that accepts an event stream gets them on its own response stream, in either era (`Transports.open` and
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

    # The task, as a prompt and a resource.

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
            session = await self.bindings.session_for(ctx.request)
            return await self.store.read_prompt(session)
        except NoEpisode as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except OrsError as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=exc.message) from None


def _progress_token(ctx: ServerRequestContext[Any, Any]) -> str | int | None:
    meta = ctx.meta or {}
    token = meta.get("progress_token", meta.get("progressToken"))
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None
