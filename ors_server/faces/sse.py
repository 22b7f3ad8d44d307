"""Server-sent events as the ORS clients read them: framing, result chunking, keepalive.

Event framing is sse-starlette's `ServerSentEvent` (CRLF line endings, `: ping - <time>` comments). The
responses are plain Starlette ones: a call that has already ended is answered with one complete body, and only
a call still running streams, with our keepalive comments between its events. (sse-starlette's
`EventSourceResponse` runs four tasks per response; measured on the call path it alone held a bare route to a
third of a plain response's rate.)

What is ours is how a result is cut into `chunk` events: the `openreward` client `lstrip()`s every `data:`
value, so a chunk that began with whitespace would silently lose it. We cut where the next piece starts with a
non-space character.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import Any

from sse_starlette import ServerSentEvent
from starlette.responses import Response, StreamingResponse

CHUNK_SIZE = 4096
SEP = "\r\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

# Python's str.splitlines() (and so some SSE readers) breaks lines at these, and JSON leaves them raw.
_LINE_BREAKING = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}


def to_json(value: Any) -> str:
    """Compact JSON that is safe on one SSE `data:` line."""
    return line_safe(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def line_safe(text: str) -> str:
    """Compact JSON text (non-ASCII left as is: `json.dumps(ensure_ascii=False)`, or pydantic's) with the characters
    that break lines but that JSON leaves raw escaped, so it is safe on one SSE `data:` line."""
    if any(char in text for char in _LINE_BREAKING):
        for char, escape in _LINE_BREAKING.items():
            text = text.replace(char, escape)
    return text


def chunk_json(text: str, size: int = CHUNK_SIZE) -> list[str]:
    """Cut compact JSON into pieces of at most `size` characters, none starting with whitespace.

    Pieces join back to `text` exactly, except in the pathological case of a string holding more than
    `size` consecutive whitespace characters: there a whitespace character at a cut is written as its
    `\\uXXXX` escape (compact JSON has whitespace only inside strings), which decodes to the same value.

    Linear in `len(text)`: each window is searched once, by `rstrip` in C, and an escape is carried into the
    next piece rather than spliced into `text` (splicing copied the whole text once per piece: an 8 MiB run
    of spaces took seconds).
    """
    pieces: list[str] = []
    start = 0
    head = ""  # the escape standing in for text[start - 1], when the last cut fell inside a whitespace run
    while len(head) + len(text) - start > size:
        room = size - len(head)
        # The piece after this one must start at a non-whitespace character in (start, start + room].
        kept = len(text[start + 1 : start + room + 1].rstrip())
        if kept:
            cut = start + kept
            pieces.append(head + text[start:cut])
            head, start = "", cut
        else:  # all whitespace: end this piece at the window's edge and escape the character after it
            cut = start + room
            pieces.append(head + text[start:cut])
            head, start = f"\\u{ord(text[cut]):04x}", cut + 1
    pieces.append(head + text[start:])
    return pieces


def event_bytes(name: str, data: str) -> bytes:
    """`event(name, data).encode()`, formatted directly: with its line breaks joined, `data` is one line, which is
    all `ServerSentEvent.encode` would do with it (the call path renders a few events per call)."""
    return f"event: {name}{SEP}data: {' '.join(data.splitlines())}{SEP}{SEP}".encode()


def result_bytes(payload: Any) -> bytes:
    """`result_events(payload)`, encoded."""
    return json_result_bytes(to_json(payload))


def json_result_bytes(text: str) -> bytes:
    """`json_result_events(text)`, encoded: the pieces of line-safe JSON hold no line break (JSON escapes them,
    `line_safe` the rest), so each is one `data:` line."""
    pieces = chunk_json(text)
    last = pieces.pop()
    chunks = "".join(f"event: chunk{SEP}data: {piece}{SEP}{SEP}" for piece in pieces)
    return f"{chunks}event: end{SEP}data: {last}{SEP}{SEP}".encode()


class Events(Response):
    """A whole event stream already encoded, in one response body (`complete`'s response, its headers built once)."""

    media_type = "text/event-stream"

    def __init__(self, body: bytes) -> None:
        self.status_code = 200
        self.background = None
        self.body = body
        # In the order Starlette's `Response` writes them: ours, then the length, then the type.
        self.raw_headers = [*_OWN_HEADERS, (b"content-length", str(len(body)).encode()), _CONTENT_TYPE]


_OWN_HEADERS = [(name.lower().encode(), value.encode()) for name, value in HEADERS.items()]
_CONTENT_TYPE = (b"content-type", b"text/event-stream; charset=utf-8")


def result_events(payload: Any) -> list[ServerSentEvent]:
    """`chunk`* then `end` for one JSON result."""
    return json_result_events(to_json(payload))


def json_result_events(text: str) -> list[ServerSentEvent]:
    """`chunk`* then `end` for one result already as line-safe compact JSON (`line_safe`)."""
    pieces = chunk_json(text)
    events = [ServerSentEvent(data=piece, event="chunk", sep=SEP) for piece in pieces[:-1]]
    events.append(ServerSentEvent(data=pieces[-1], event="end", sep=SEP))
    return events


def event(name: str, data: str) -> ServerSentEvent:
    # One `data:` line per event: the clients keep only the last line of a multi-line value.
    return ServerSentEvent(data=" ".join(data.splitlines()), event=name, sep=SEP)


def keepalive() -> bytes:
    return ServerSentEvent(comment=f"ping - {datetime.now(UTC)}", sep=SEP).encode()


def complete(events: Iterable[ServerSentEvent]) -> Response:
    """A whole event stream in one response body."""
    return Events(b"".join(e.encode() for e in events))


def stream(chunks: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/event-stream", headers=HEADERS)
