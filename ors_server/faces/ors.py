"""The Open Reward Standard face: REST discovery and episode endpoints, tool calls over SSE.

Behaviour follows what the official clients (`openreward`, `ors-sdk`) do rather than the docs where the two
disagree (tests/clients/test_openreward_client.py and test_ors_sdk_client.py run them against this face):
`/create_session` answers SSE to clients that accept it, secrets come from the `X-Secrets` header or the body,
and bare paths (`/call`, `/prompt`, ...) are served directly: for the session's own environment on session
endpoints, for the default environment on discovery endpoints.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, model_validator
from sse_starlette import ServerSentEvent
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Scope

from ors_server import ids
from ors_server.calls import CallResult, Calls, ToolCall, ToolCrashed, ToolRejected
from ors_server.environment import Environment, ToolDef
from ors_server.errors import (
    BadRequest,
    InvalidIndex,
    InvalidSplit,
    NotFound,
    OrsError,
    Unavailable,
)
from ors_server.faces import PORT_ENV, Core, Face, Naming, env_of, header_key, sse, wirejson
from ors_server.faces.openapi import Endpoint, openapi_document
from ors_server.faces.progress import ProgressFeed
from ors_server.faces.scoring import ScoreJob, Scoring, ScoringUnsupported
from ors_server.records.labels import HEADER as LABELS_HEADER
from ors_server.records.labels import parse_header as parse_labels
from ors_server.registry import Registry
from ors_server.sessions import Session, SessionStore
from ors_server.settings import Settings
from ors_server.toolsets import toolset_problem
from ors_server.types import MESSAGE_BLOCK_TYPES, Blocks, GroupCandidate, Message, Split, ToolOutput

logger = logging.getLogger("ors_server.ors")

FAST_ANSWER_WAIT = 0.5
"""Seconds a call may take and still be answered in one response rather than streamed."""
ORS_REASONS = {"not_found", "name_collision", "input_validation", "episode_finished"}
_blocks = TypeAdapter(Blocks)
_messages = TypeAdapter(list[Message])
CLIENT_IDS = {"X-Client-Session-Ids": "accepted"}
"""On `/create_session`: `/create` takes any free id the client makes up (1-128 of `[A-Za-z0-9_.:-]`), so a client
may skip this round trip for its next sessions (`ors-client` does)."""
SESSION_TIMEOUT_HEADER = "X-Session-Timeout"
"""On `/create`: the idle seconds after which the server reaps the session (`--session-timeout`)."""


# Request bodies.


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SplitBody(_Body):
    split: str


class TaskBody(_Body):
    split: str
    index: int


class TaskRangeBody(_Body):
    split: str
    start: int | None = None
    stop: int | None = None


class CreateBody(_Body):
    env_name: str | None = None
    task_spec: dict[str, Any] | None = None
    split: str | None = None
    index: int | None = None
    toolset_name: str | None = None
    secrets: dict[str, str] | None = None

    @model_validator(mode="after")
    def _one_task_form(self) -> CreateBody:
        by_index = self.split is not None and self.index is not None
        half_index = (self.split is None) != (self.index is None)
        if (self.task_spec is not None) == by_index or half_index:
            raise ValueError("Provide either task_spec or both split and index, not both/neither")
        return self


class CallBody(_Body):
    name: str = ""
    input: dict[str, Any] | None = None
    task_id: str | None = None

    @model_validator(mode="after")
    def _input_unless_resuming(self) -> CallBody:
        if self.task_id is None and (not self.name or self.input is None):
            raise ValueError("a tool call needs `name` and `input` (or `task_id` to resume a call)")
        return self


class ScoreGroupBody(_Body):
    candidates: list[GroupCandidate]
    task_id: str | None = None


class BodyInvalid(OrsError):
    """A request body that does not parse or validate: 422 with FastAPI's list of errors."""

    status = 422

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("request body is invalid")
        self.errors = errors


async def read_body(request: Request, model: type[BaseModel], *, empty_ok: bool = False) -> Any:
    """The body as `model`. Its size is already bounded: the entry (`http/entry.py`) answers 413 past the limit."""
    raw = await _raw_body(request)
    if not raw.strip() and empty_ok:
        raw = b"{}"
    try:
        # Parsed and validated in one pass by pydantic (a third of `json.loads` and `model_validate`'s cost). Its
        # parser accepts no text that `wirejson` refuses; what it refuses goes the long way below, which gives
        # the errors, or the value, the clients have always had (nesting deeper than its limit, a UTF-16 body).
        return model.model_validate_json(raw)
    except ValidationError:
        pass
    try:
        data = wirejson.loads(raw)
    except wirejson.MalformedJson as exc:
        raise BodyInvalid([{"type": "json_invalid", "loc": ["body"], "msg": f"JSON decode error: {exc}"}]) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # Without the offending input: a /create body carries secrets.
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise BodyInvalid([{**e, "loc": ["body", *e["loc"]]} for e in errors]) from None


async def _raw_body(request: Request) -> bytes:
    """The request's body, as `request.body()` reads it (ClientDisconnect if the client leaves first), without its
    async generator: every ORS request with a body reads it here."""
    chunks = []
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


# Helpers.


def _secrets(request: Request, body: CreateBody) -> dict[str, str]:
    secrets = dict(body.secrets or {})
    header = request.headers.get("x-secrets")
    if header:
        try:
            decoded = wirejson.loads(base64.b64decode(header, validate=True))
            from_header = {key: entry["value"] for key, entry in decoded.items()}
        except (binascii.Error, ValueError, TypeError, KeyError, AttributeError):
            raise BadRequest('X-Secrets must be base64 of JSON {name: {"value": str}}') from None
        if not all(isinstance(value, str) for value in from_header.values()):
            raise BadRequest("X-Secrets values must be strings")
        secrets.update(from_header)
    return secrets


async def _split_name(store: SessionStore, env_cls: type[Environment], split: str) -> str:
    names = [Split.of(s).name for s in await store.runtime.discover(env_cls.list_splits)]
    if split not in names:
        raise InvalidSplit()
    return split


def tool_specs(tools: Sequence[ToolDef], env_cls: type[Environment]) -> dict[str, Any]:
    """ORS `ListToolsOutput`: the tools, and what `openreward` 0.1.157+ reads beside them. The terminal tool stays
    in `tools` too (openreward's server hides it), so clients that know nothing of terminal tools can call it."""
    term = next((t for t in tools if t.terminal), None)
    terminal_tool = None
    if term is not None:
        # Its one field, which takes the message (from its schema: a hosted tool has no model here).
        arg = next(iter((term.schema or {}).get("properties") or {}), None)
        terminal_tool = {"name": term.name, "arg": arg, "description": term.description}
    return {
        "tools": [{"name": t.name, "description": t.description, "input_schema": t.schema} for t in tools],
        "terminal_tool": terminal_tool,
        "supports_score_group": env_cls.supports_score_group(),
        "message_block_types": MESSAGE_BLOCK_TYPES,
    }


async def _get_task(store: SessionStore, env_cls: type[Environment], split: str, index: int) -> dict[str, Any]:
    split = await _split_name(store, env_cls, split)
    try:
        return await store.runtime.discover(env_cls.get_task, split, index)
    except IndexError:
        raise InvalidIndex() from None


async def _stream_call(
    session: Session, running: ToolCall, feed: ProgressFeed, keepalive: float
) -> AsyncIterator[bytes]:
    yield sse.event("task_id", running.id).encode()
    while not running.done:
        with anyio.move_on_after(keepalive):
            await feed.next_or_end(running)
        news = progress_events(feed)
        if news:
            yield b"".join(event.encode() for event in news)
        elif not running.done:
            yield sse.keepalive()
    session.touch()
    result = await running.wait()  # ended: at once
    yield b"".join(event.encode() for event in [*progress_events(feed), *render_result(result, running)])


def progress_events(feed: ProgressFeed) -> list[ServerSentEvent]:
    """The reports not yet sent, as `progress` events (`{"progress", "total", "message"}`, which the official
    clients skip)."""
    return [
        sse.event("progress", sse.to_json({"progress": report.done, "total": report.total, "message": report.message}))
        for report in feed.take()
    ]


def _score_events(job: ScoreJob) -> list[ServerSentEvent]:
    if job.scores is None:
        return [sse.event("error", job.error or "score_group failed")]
    return sse.result_events({"scores": [score.model_dump(mode="json") for score in job.scores]})


async def _stream_scoring(job: ScoreJob, keepalive: float) -> AsyncIterator[bytes]:
    yield sse.event("task_id", job.id).encode()
    while not job.ended.is_set():
        with anyio.move_on_after(keepalive):
            await job.ended.wait()
        if not job.ended.is_set():
            yield sse.keepalive()
    job.session.touch()
    yield b"".join(event.encode() for event in _score_events(job))


def output_json(output: ToolOutput, call: ToolCall | None = None) -> str:
    """A tool's output as the result's line-safe JSON: `{"ok":true,"output":...}` around pydantic's own
    serialisation (`model_dump_json`), the value `to_json({"ok": True, "output": output.model_dump(mode="json")})`
    has at a fifth of the cost, and serialised once with the call it ended (`ToolCall.output_json`), which keeps
    it for replay."""
    text = output.model_dump_json() if call is None else call.output_json()
    return sse.line_safe(f'{{"ok":true,"output":{text}}}')


def result_bytes(result: CallResult, call: ToolCall | None = None) -> bytes:
    """`render_result(result)`, encoded (the call path's rendering, without event objects)."""
    if isinstance(result, ToolOutput):
        return sse.json_result_bytes(output_json(result, call))
    if isinstance(result, ToolRejected):
        reason = result.reason if result.reason in ORS_REASONS else None
        return sse.result_bytes({"ok": False, "error": result.message, "reason": reason})
    assert isinstance(result, ToolCrashed)
    return sse.event_bytes("error", result.message)


def render_result(result: CallResult, call: ToolCall | None = None) -> list[ServerSentEvent]:
    if isinstance(result, ToolOutput):
        return sse.json_result_events(output_json(result, call))
    if isinstance(result, ToolRejected):
        reason = result.reason if result.reason in ORS_REASONS else None
        return sse.result_events({"ok": False, "error": result.message, "reason": reason})
    assert isinstance(result, ToolCrashed)
    return [sse.event("error", result.message)]


# The endpoints.


class OrsFace:
    """The ORS endpoints over one core (the routes lead to these methods: `routes`)."""

    def __init__(self, registry: Registry, store: SessionStore, calls: Calls, settings: Settings) -> None:
        self.registry, self.store, self.calls, self.settings = registry, store, calls, settings
        self.scoring = Scoring(store)

    def _path_env(self, request: Request) -> type[Environment]:
        return env_of(self.registry, request.scope, request.path_params.get("env"))

    def _path_env_name(self, request: Request) -> str | None:
        """The environment named by the path (checked against the session's), or None on a bare path."""
        name = request.path_params.get("env")
        return None if name is None else self.registry.get(name).name

    def _session_id(self, request: Request) -> str:
        # The first X-Session-ID, as `request.headers.get` finds it, without building the headers' mapping.
        for name, value in request.scope["headers"]:
            if name == b"x-session-id":
                return self.store.check_id(value.decode("latin-1").strip())
        raise BadRequest("X-Session-ID header is required")

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def version(self, request: Request) -> Response:
        from importlib.metadata import version as dist_version

        return JSONResponse({"version": dist_version("ors-server"), "build_sha": None})

    async def list_environments(self, request: Request) -> Response:
        names = self.registry.names
        port_env = request.scope.get(PORT_ENV)
        if port_env is not None:  # "the first is the default": on an environment's own port, that one
            first = self.registry.get(port_env).name
            names = [first, *(name for name in names if name != first)]
        return JSONResponse(names)

    async def tools(self, request: Request) -> Response:
        env_cls = self._path_env(request)
        return JSONResponse(tool_specs(await self.calls.tools(env_cls), env_cls))

    async def splits(self, request: Request) -> Response:
        env_cls = self._path_env(request)
        return JSONResponse([Split.of(s).model_dump() for s in await self.store.runtime.discover(env_cls.list_splits)])

    async def tasks(self, request: Request) -> Response:
        env_cls = self._path_env(request)
        body = await read_body(request, SplitBody)
        split = await _split_name(self.store, env_cls, body.split)
        try:
            found = await self.store.runtime.discover(env_cls.list_tasks, split)
        except NotImplementedError:
            raise BadRequest(f"'{env_cls.name}' does not list its tasks; use /num_tasks and /task") from None
        return JSONResponse({"tasks": found, "env_name": env_cls.name})

    async def num_tasks(self, request: Request) -> Response:
        env_cls = self._path_env(request)
        body = await read_body(request, SplitBody)
        store = self.store
        split = await _split_name(store, env_cls, body.split)
        return JSONResponse({"num_tasks": await store.runtime.discover(env_cls.num_tasks, split)})

    async def task(self, request: Request) -> Response:
        env_cls = self._path_env(request)
        body = await read_body(request, TaskBody)
        return JSONResponse(
            {"task": await _get_task(self.store, env_cls, body.split, body.index), "env_name": env_cls.name}
        )

    async def task_range(self, request: Request) -> Response:
        env_cls = self._path_env(request)
        body = await read_body(request, TaskRangeBody)
        split = await _split_name(self.store, env_cls, body.split)
        try:
            found = await self.store.runtime.discover(env_cls.get_task_range, split, body.start, body.stop)
        except (IndexError, ValueError):
            raise InvalidIndex("Invalid index range") from None
        return JSONResponse({"tasks": found, "env_name": env_cls.name})

    async def create_session(self, request: Request) -> Response:
        # Never tagged with the worker: the session is made at `/create`, which a front places by load anywhere.
        sid = ids.mint(None)
        if "text/event-stream" in request.headers.get("accept", ""):
            # The official clients read the sid from an SSE `task_id` event (a JSON reply makes them retry forever).
            body = sse.event("task_id", sid).encode() + sse.event("end", "").encode()
            return Response(body, media_type="text/event-stream", headers={**sse.HEADERS, **CLIENT_IDS})
        return JSONResponse({"sid": sid}, headers=CLIENT_IDS)

    async def create(self, request: Request) -> Response:
        sid = self._session_id(request)
        body = await read_body(request, CreateBody)
        env_cls = env_of(self.registry, request.scope, body.env_name)
        request.state.env = env_cls.name
        if body.env_name is None:
            logger.debug(
                "session %s: /create names no env_name (an openreward client without a variant): "
                "serving the default environment '%s' (%s)",
                sid,
                env_cls.name,
                "its port's" if request.scope.get(PORT_ENV) else "the server's first",
            )
        secrets = _secrets(request, body)
        task_spec = body.task_spec
        if task_spec is None:
            assert body.split is not None and body.index is not None
            task_spec = await _get_task(self.store, env_cls, body.split, body.index)
        if body.toolset_name is not None:
            problem = toolset_problem(body.toolset_name, env_cls)
            if problem is not None:
                raise BadRequest(problem)
        labels = parse_labels(request.headers.get(LABELS_HEADER))
        self.store.create(sid, env_cls, task_spec, secrets, labels=labels, toolset=body.toolset_name)
        # Clients keep a session alive by pinging within this many idle seconds (`ors-client` pings at a third).
        timeout = self.settings.session_timeout
        return JSONResponse({"sid": sid}, headers={SESSION_TIMEOUT_HEADER: f"{timeout:g}"})

    async def ping(self, request: Request) -> Response:
        self.store.get(self._session_id(request))
        return JSONResponse({"status": "ok"})

    async def delete(self, request: Request) -> Response:
        sid = self._session_id(request)
        await self.store.discard(sid, "deleted")
        return JSONResponse({"sid": sid})

    async def delete_session(self, request: Request) -> Response:
        return JSONResponse({"sid": self._session_id(request)})

    async def prompt(self, request: Request) -> Response:
        store = self.store
        session = await store.get_ready(self._session_id(request), self._path_env_name(request))
        return JSONResponse(_blocks.dump_python(await store.read_prompt(session), mode="json"))

    async def task_tools(self, request: Request) -> Response:
        session = self.store.get(self._session_id(request), self._path_env_name(request))
        return JSONResponse(tool_specs(await self.calls.tools(session.env_cls, session), session.env_cls))

    async def messages(self, request: Request) -> Response:
        store = self.store
        session = await store.get_ready(self._session_id(request), self._path_env_name(request))
        return JSONResponse(_messages.dump_python(await store.read_messages(session), mode="json"))

    async def score_group(self, request: Request) -> Response:
        sid = self._session_id(request)
        env_name = self._path_env_name(request)
        body = await read_body(request, ScoreGroupBody)
        session = await self.store.get_ready(sid, env_name)
        if body.task_id is not None:
            job = self.scoring.find(session, body.task_id)
            if job is None:
                return sse.complete([sse.event("error", "unknown task_id")])
        else:
            try:
                job = self.scoring.start(session, body.candidates)
            except ScoringUnsupported as exc:
                raise NotFound(str(exc)) from None  # before the stream: clients tell "unsupported" by the 404
        keepalive = self.store.settings.sse_keepalive
        with anyio.move_on_after(min(FAST_ANSWER_WAIT, keepalive)):
            await job.ended.wait()
        if job.ended.is_set():
            return sse.complete([sse.event("task_id", job.id), *_score_events(job)])
        return sse.stream(_stream_scoring(job, keepalive))

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document(self.registry, ENDPOINTS))

    async def call(self, request: Request) -> Response:
        store, calls = self.store, self.calls
        sid = self._session_id(request)
        env_name = self._path_env_name(request)
        body = await read_body(request, CallBody)
        session = await store.get_ready(sid, env_name)
        state = request.scope.setdefault("state", {})  # what `request.state` writes to, for the access log
        state["tool"] = session.redact(body.name)  # any string, a secret value too
        state["env"] = session.env_name
        feed = ProgressFeed()
        if body.task_id is not None:
            running = calls.find(session, body.task_id)
            if running is None:
                return sse.complete([sse.event("error", "unknown task_id")])
        else:
            running = calls.start(session, body.name, body.input, face="ors", progress=feed)
        keepalive = store.settings.sse_keepalive
        # Most calls end within milliseconds: answer those in one response, and stream only the slow ones.
        result = await running.wait_at_most(min(FAST_ANSWER_WAIT, keepalive))
        if result is not None:
            session.touch()
            news = progress_events(feed)
            head = sse.event_bytes("task_id", running.id)
            return sse.Events(b"".join([head, *(e.encode() for e in news), result_bytes(result, running)]))
        return sse.stream(_stream_call(session, running, feed, keepalive))


# Errors: one renderer from the domain tree to `{"detail": ...}`.


def render_error(exc: OrsError) -> Response:
    headers = exc.headers
    if isinstance(exc, Unavailable) and exc.backend_state:
        headers = {**headers, "X-Backend-State": exc.backend_state}
    detail = exc.errors if isinstance(exc, BodyInvalid) else exc.message
    return JSONResponse({"detail": detail}, exc.status, headers=headers)


# Routes: one table, from which both the router and the OpenAPI document are built.


ENDPOINTS = [
    Endpoint("/health", "health", "GET", "Liveness"),
    Endpoint("/version", "version", "GET", "Server version"),
    Endpoint("/list_environments", "list_environments", "GET", "Environment names; the first is the default"),
    Endpoint("/create_session", "create_session", "POST", "A new session id (SSE with Accept: text/event-stream)"),
    Endpoint("/create", "create", "POST", "Start an episode in the session", CreateBody, session=True),
    Endpoint("/ping", "ping", "POST", "Keep the session alive", session=True),
    Endpoint("/delete", "delete", "POST", "End the episode and tear it down", session=True),
    Endpoint("/delete_session", "delete_session", "POST", "Release the session id", session=True),
    Endpoint("/call", "call", "POST", "Call a tool; the result streams as SSE", CallBody, session=True, per_env=True),
    Endpoint("/tools", "tools", "GET", "The environment's tools", per_env=True),
    Endpoint("/splits", "splits", "GET", "The environment's splits", per_env=True),
    Endpoint("/tasks", "tasks", "POST", "Every task of a split", SplitBody, per_env=True),
    Endpoint("/num_tasks", "num_tasks", "POST", "How many tasks a split has", SplitBody, per_env=True),
    Endpoint("/task", "task", "POST", "One task of a split", TaskBody, per_env=True),
    Endpoint("/task_range", "task_range", "POST", "A slice of a split's tasks", TaskRangeBody, per_env=True),
    Endpoint("/prompt", "prompt", "GET", "The episode's opening blocks", session=True, per_env=True),
    Endpoint("/task_tools", "task_tools", "GET", "The tools of this session's task", session=True, per_env=True),
    Endpoint("/messages", "messages", "GET", "The episode's opening as a conversation", session=True, per_env=True),
    Endpoint(
        "/score_group",
        "score_group",
        "POST",
        "Score a group of candidate completions; the scores stream as SSE",
        ScoreGroupBody,
        session=True,
        per_env=True,
    ),
]


def routes(face: OrsFace | None) -> list[BaseRoute]:
    """Every endpoint to `face`'s method of its name (or, with no face, to nowhere: the shape a front needs):
    `/{env}/path` and the bare path for per-environment endpoints, the hot paths (tool calls) first, since
    Starlette tries routes in order."""

    def to(name: str) -> Any:
        return getattr(face, name) if face is not None else Response(status_code=404)

    per_env = [e for e in ENDPOINTS if e.per_env]
    return [
        *(Route("/{env}" + e.path, to(e.handler), methods=[e.method]) for e in per_env),
        *(Route(e.path, to(e.handler), methods=[e.method]) for e in per_env),
        *(Route(e.path, to(e.handler), methods=[e.method]) for e in ENDPOINTS if not e.per_env),
        Route("/openapi.json", to("openapi")),
    ]


def names_session(scope: Scope, body: bytes | None) -> Naming:
    """An ORS request names its session by `X-Session-ID`; `POST /create` starts the episode under it."""
    creates = scope["method"] == "POST" and scope["path"].rstrip("/").endswith("/create")
    return Naming(header_key(scope, b"x-session-id"), creates)


def shape() -> Face:
    """The face's routes, error renderer and session naming, without a face behind them (what a front needs)."""
    return Face("ors", routes(None), render_error, names_session=names_session)


def face(core: Core) -> Face:
    ors = OrsFace(core.registry, core.store, core.calls, core.settings)
    return Face("ors", routes(ors), render_error, names_session=names_session)
