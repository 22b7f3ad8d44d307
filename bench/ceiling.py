"""The stack's ceiling: bare Starlette routes answering `/call`'s SSE bytes with no session work.

    uvicorn bench.ceiling:app --port 8002 --log-level warning

`/counter/call` reads and parses the body and answers the bytes our `/call` sends, as one plain response.
`/stream/call` and `/sse/call` send the same events through `StreamingResponse` and sse-starlette's
`EventSourceResponse`, to price the response classes (see PROFILE.md).

`asgi` is the stack's floor: a pure ASGI app (no Starlette) answering `/counter/call` with the same bytes in one
response, on the same uvicorn (`uvicorn bench.ceiling:asgi`): what any server on this stack pays per call.

So that a real ORS client can drive it (bench/run.py workload u), it also answers the session endpoints in our
server's shapes (`/counter/tasks`, `/counter/tools`, `/create_session`, `/create`, `/ping`, `/delete`,
`/delete_session`), keeping nothing: every id is accepted.
"""

from __future__ import annotations

import json
import uuid

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
RESULT = (
    '{"ok":true,"output":{"blocks":[{"type":"text","text":"1","detail":null}],"metadata":null,'
    '"reward":0.0,"finished":false}}'
)


def events(task_id: str) -> list[str]:
    return [f"event: task_id\r\ndata: {task_id}\r\n\r\n", f"event: end\r\ndata: {RESULT}\r\n\r\n"]


async def plain(request: Request) -> Response:
    json.loads(await request.body())
    body = "".join(events(uuid.uuid4().hex)).encode()
    return Response(body, media_type="text/event-stream", headers=HEADERS)


async def streaming(request: Request) -> Response:
    json.loads(await request.body())

    async def chunks():
        for text in events(uuid.uuid4().hex):
            yield text.encode()

    return StreamingResponse(chunks(), media_type="text/event-stream", headers=HEADERS)


async def sse(request: Request) -> Response:
    json.loads(await request.body())

    async def items():
        yield ServerSentEvent(data=uuid.uuid4().hex, event="task_id", sep="\r\n")
        yield ServerSentEvent(data=RESULT, event="end", sep="\r\n")

    return EventSourceResponse(items(), ping=10, sep="\r\n", headers=HEADERS)


async def tasks(request: Request) -> Response:
    return JSONResponse({"tasks": [{"start": 0}], "env_name": "counter"})


async def tools(request: Request) -> Response:
    tick = {"name": "tick", "description": "Add one to the counter.", "input_schema": {"type": "object"}}
    return JSONResponse({"tools": [tick]})


async def create_session(request: Request) -> Response:
    sid, ids = uuid.uuid4().hex, {"X-Client-Session-Ids": "accepted"}
    if "text/event-stream" in request.headers.get("accept", ""):
        body = f"event: task_id\r\ndata: {sid}\r\n\r\nevent: end\r\ndata: \r\n\r\n".encode()
        return Response(body, media_type="text/event-stream", headers={**HEADERS, **ids})
    return JSONResponse({"sid": sid}, headers=ids)


async def session_reply(request: Request) -> Response:
    await request.body()
    return JSONResponse({"sid": request.headers.get("x-session-id", "")}, headers={"X-Session-Timeout": "900"})


async def ping(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


app = Starlette(
    routes=[
        Route("/counter/call", plain, methods=["POST"]),
        Route("/counter/tasks", tasks, methods=["POST"]),
        Route("/counter/tools", tools),
        Route("/create_session", create_session, methods=["POST"]),
        Route("/create", session_reply, methods=["POST"]),
        Route("/ping", ping, methods=["POST"]),
        Route("/delete", session_reply, methods=["POST"]),
        Route("/delete_session", session_reply, methods=["POST"]),
        Route("/stream/call", streaming, methods=["POST"]),
        Route("/sse/call", sse, methods=["POST"]),
    ]
)


ASGI_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    *((k.lower().encode(), v.encode()) for k, v in HEADERS.items()),
]


async def asgi(scope, receive, send) -> None:
    """The pure ASGI floor: read the body, parse it, answer `/call`'s SSE bytes in one response."""
    if scope["type"] != "http":
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
        return
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    json.loads(body)
    reply = "".join(events(uuid.uuid4().hex)).encode()
    headers = [*ASGI_HEADERS, (b"content-length", str(len(reply)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": reply})
