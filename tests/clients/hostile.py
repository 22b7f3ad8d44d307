"""A tiny HTTP server that answers as a hostile or broken ORS server would, for the client tests.

Each route (method, path) names a function that writes the raw answer to the socket, so a test can send what no
well-behaved server sends: redirects to another origin, a 200 MB body, a stream line that never ends. Every request
is kept (method, path, headers, body) so a test can say what a server was sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import BinaryIO

PIECE = 1 << 20


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Answer = Callable[[BinaryIO], None]
"""Writes a whole raw HTTP response (status line, headers, body) to the connection."""


def raw(status: int, headers: dict[str, str], body: Iterable[bytes] | bytes = b"") -> Answer:
    """An answer with these headers as given (no Content-Length added): the body is written piece by piece."""

    def write(out: BinaryIO) -> None:
        head = f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        out.write(head.encode())
        for piece in [body] if isinstance(body, bytes) else body:
            out.write(piece)
        out.flush()

    return write


def json_answer(value: object, status: int = 200) -> Answer:
    body = json.dumps(value).encode()
    return raw(status, {"Content-Type": "application/json", "Content-Length": str(len(body))}, body)


def redirect(status: int, location: str) -> Answer:
    return raw(status, {"Location": location, "Content-Length": "0"})


def filler(size: int, byte: bytes = b"x") -> Iterator[bytes]:
    """`size` bytes of `byte`, a piece at a time (so the server itself holds one piece)."""
    piece = byte * PIECE
    while size > 0:
        yield piece[:size]
        size -= PIECE


def chunked(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """`pieces` in HTTP/1.1 chunked framing, then the last chunk."""
    for piece in pieces:
        yield b"%x\r\n%s\r\n" % (len(piece), piece)
    yield b"0\r\n\r\n"


def session_routes(env: str) -> dict[tuple[str, str], Answer]:
    """What a client needs to open and close a session on `env`: an id, `/create`, the tools, `/delete`."""
    return {
        ("POST", "/create_session"): json_answer({"sid": "hostile-1"}),
        ("POST", "/create"): json_answer({"sid": "hostile-1"}),
        ("GET", f"/{env}/tools"): json_answer({"tools": []}),
        ("POST", "/delete"): json_answer({}),
    }


class HostileServer:
    """Serves `routes` on a loopback port from a thread of its own; anything else is a 404."""

    def __init__(self, routes: dict[tuple[str, str], Answer]) -> None:
        self.routes = routes
        self.seen: list[Seen] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                server.seen.append(Seen(self.command, path, dict(self.headers.items()), body))
                answer = server.routes.get((self.command, path)) or json_answer({"detail": "Not Found"}, 404)
                try:
                    answer(self.wfile)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client stopped reading: what a bounded client does

            do_GET = do_POST = _answer

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def requests_to(self, path: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.path == path]

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
