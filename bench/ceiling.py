"""The stack's ceiling: bare Starlette routes answering `/call`'s SSE bytes with no session work.

    uvicorn bench.ceiling:app --port 8002 --log-level warning

`/counter/call` reads and parses the body and answers the bytes our `/call` sends, as one plain response.
`/stream/call` and `/sse/call` send the same events through `StreamingResponse` and sse-starlette's
`EventSourceResponse`, to price the response classes (see PROFILE.md).
"""

from __future__ import annotations

import json
import uuid

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
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


app = Starlette(
    routes=[
        Route("/counter/call", plain, methods=["POST"]),
        Route("/stream/call", streaming, methods=["POST"]),
        Route("/sse/call", sse, methods=["POST"]),
    ]
)
