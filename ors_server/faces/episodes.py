"""The episode records' REST readers: `/episodes` (list, with filters and cursor pagination), `/episodes/{id}` (a
page of its calls at a time: `calls_cursor`, `calls_limit`, answered with `calls_next`), `/episodes/{id}/events`
(SSE: the calls of a live episode as they happen, then `end`), `/episodes/export` (streaming JSON Lines: our own
records, or Eval Protocol `EvaluationRow`s) and `/episodes/stats` (figures by group, computed by the database).

A face like the others (behind the API key, errors as `{"detail": ...}`), but over the records database rather
than the session store: it reads what every process of a deployment writes there, so behind a front any worker
answers for all of them. With `--records off` every path answers 404 saying so.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ors_server.errors import BadRequest, NotFound, OrsError, StreamsFull
from ors_server.faces import Core, Face, sse
from ors_server.records.labels import checked
from ors_server.records.reading import CALLS_LIMIT, DEFAULT_LIMIT, FORMATS, MAX_LIMIT, Filters, Reader

LABEL_PREFIX = "label."


def _reader(request: Request) -> Reader:
    reader: Reader | None = getattr(request.app.state, "records", None)
    if reader is None:
        raise NotFound("episode records are off on this server (--records off)")
    return reader


def _filters(request: Request) -> Filters:
    query = request.query_params
    labels = {key[len(LABEL_PREFIX) :]: value for key, value in query.items() if key.startswith(LABEL_PREFIX)}
    try:
        return Filters.parse(dict(query), checked(labels, "label filters"))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _limit(request: Request) -> int:
    text = request.query_params.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_LIMIT}")
    return int(text)


async def list_episodes(request: Request) -> Response:
    reader = _reader(request)
    filters, limit = _filters(request), _limit(request)
    try:
        page = await reader.page(filters, limit, request.query_params.get("cursor"))
    except ValueError:
        raise BadRequest("cursor must be the `next` of an earlier page") from None
    return JSONResponse(page)


async def episode_stats(request: Request) -> Response:
    """Figures of the episodes `/episodes` would list, by `group_by` (env, task or label.KEY; all in one group
    without it), and with `bucket=SECONDS` per bucket of start time too."""
    reader = _reader(request)
    filters = _filters(request)
    group_by = request.query_params.get("group_by") or None
    if group_by is not None and group_by not in ("env", "task"):
        if not group_by.startswith(LABEL_PREFIX):
            raise BadRequest(f"group_by must be env, task or label.KEY, got {group_by!r}"[:200])
        checked({group_by[len(LABEL_PREFIX) :]: ""}, "group_by")
    bucket = _bucket(request)
    try:
        return JSONResponse(await reader.stats(group_by, filters, bucket))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _bucket(request: Request) -> float | None:
    text = request.query_params.get("bucket")
    if text is None:
        return None
    try:
        bucket = float(text)
    except ValueError:
        bucket = math.nan
    if not math.isfinite(bucket) or bucket < 1:
        raise BadRequest(f"bucket must be a number of seconds of at least 1, got {text!r}"[:200])
    return bucket


def _calls_page(request: Request) -> tuple[int, int]:
    """Where a page of an episode's calls starts (after the call `calls_cursor` names), and how many it holds."""
    query = request.query_params
    cursor, limit = query.get("calls_cursor"), query.get("calls_limit")
    if cursor is not None and not (cursor.isdigit() and len(cursor) < 19):
        raise BadRequest("calls_cursor must be the `calls_next` of an earlier page")
    if limit is not None and not (limit.isdigit() and int(limit) <= CALLS_LIMIT):
        raise BadRequest(f"calls_limit must be an integer from 0 to {CALLS_LIMIT}")
    return (-1 if cursor is None else int(cursor)), (CALLS_LIMIT if limit is None else int(limit))


async def show_episode(request: Request) -> Response:
    after, limit = _calls_page(request)
    body = await _reader(request).episode_page(request.path_params["episode_id"], after, limit)
    if body is None:
        raise NotFound("no such episode")
    return Response(body, media_type="application/json")


async def episode_events(request: Request) -> Response:
    reader = _reader(request)
    episode_id = request.path_params["episode_id"]
    if await reader.episode(episode_id) is None:
        raise NotFound("no such episode")
    settings = request.app.state.settings
    if reader.streams >= settings.records_streams:
        raise StreamsFull(settings.records_streams)
    keepalive = settings.sse_keepalive
    store = request.app.state.store

    async def stream() -> AsyncIterator[bytes]:
        last = time.monotonic()
        async for kind, data in reader.events(episode_id):
            if kind == "ping":
                if store.closing:
                    return  # the server is stopping: an open stream must not hold its shutdown
                if time.monotonic() - last < keepalive:
                    continue
                yield sse.keepalive()
            else:
                yield sse.event(kind, sse.to_json(data)).encode()
            last = time.monotonic()

    return CountedStream(reader, stream())


class CountedStream(StreamingResponse):
    """An event stream counted in `Reader.streams` from its making (no await in between: the check above is
    exact) until it is done, whether or not it ever started (a client gone before it did)."""

    def __init__(self, reader: Reader, content: AsyncIterator[bytes]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=sse.HEADERS)
        self.reader = reader
        reader.streams += 1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.reader.streams -= 1


async def export(request: Request) -> Response:
    reader = _reader(request)
    format = request.query_params.get("format", "jsonl")
    if format not in FORMATS:
        raise BadRequest(f"format must be {' or '.join(FORMATS)}, got {format!r}"[:200])
    filters = _filters(request)
    return StreamingResponse(reader.export(filters, format), media_type="application/x-ndjson")


def render_error(exc: OrsError) -> Response:
    return JSONResponse({"detail": exc.message}, exc.status, headers=exc.headers)


def shape() -> Face:
    routes = [
        Route("/episodes", list_episodes, methods=["GET"]),
        Route("/episodes/export", export, methods=["GET"]),
        Route("/episodes/stats", episode_stats, methods=["GET"]),
        Route("/episodes/{episode_id}", show_episode, methods=["GET"]),
        Route("/episodes/{episode_id}/events", episode_events, methods=["GET"]),
    ]
    return Face("episodes", routes, render_error)


def face(core: Core) -> Face:
    return shape()
