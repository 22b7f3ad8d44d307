"""HTTP/1.1 and WebSocket handshakes over a plain socket, for what httpx will not send: a header twice, a request
head whose body never follows, a client that floods and never reads."""

from __future__ import annotations

import base64
import json
import os
import select
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def connect(url: str, timeout: float = 10.0) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=timeout)


def head(method: str, target: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def websocket_head(target: str, headers: list[tuple[str, str]]) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    upgrade = [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Key", key)]
    return head("GET", target, [*upgrade, ("Sec-WebSocket-Version", "13"), *headers])


def read_answer(sock: socket.socket) -> Answer:
    """One response read off `sock` (its Content-Length body; a 101 has none). A timeout raises TimeoutError."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a whole response head: {data!r}")
        data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = raw_head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    length = int(headers.get("content-length", "0"))
    status = int(status_line.split()[1])
    while status != 101 and len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return Answer(status, headers, body[:length] if status != 101 else body)


def exchange(url: str, request: bytes, timeout: float = 10.0) -> Answer:
    """Send `request` (a head, with or without its body) on a new connection and read one answer."""
    with connect(url, timeout) as sock:
        sock.sendall(request)
        return read_answer(sock)


def frame(opcode: int, payload: bytes = b"") -> bytes:
    """One final client frame."""
    if len(payload) < 126:
        length = bytes([0x80 | len(payload)])
    elif len(payload) < 1 << 16:
        length = bytes([0x80 | 126]) + len(payload).to_bytes(2, "big")
    else:
        length = bytes([0x80 | 127]) + len(payload).to_bytes(8, "big")
    # A client must mask, with any key: the zero key leaves the payload as it is (and costs nothing to apply).
    return bytes([0x80 | opcode]) + length + bytes(4) + payload


def open_websocket(url: str, target: str, headers: list[tuple[str, str]] | None = None) -> socket.socket:
    """A socket past a WebSocket handshake (101), with a small receive buffer: a client that will not read."""
    parts = urlsplit(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting, so the window is small
    sock.settimeout(10)
    sock.connect((parts.hostname, parts.port))
    sock.sendall(websocket_head(target, [("Host", "127.0.0.1"), *(headers or [])]))
    answer = read_answer(sock)
    assert answer.status == 101, answer
    return sock


@dataclass
class Flood:
    sent: int = 0
    cut: bool = False
    """The server closed or reset the connection."""


def flood(sock: socket.socket, data: bytes, seconds: float, most: int) -> Flood:
    """Send `data` again and again, never reading, until the server cuts the connection, `most` bytes are sent or
    `seconds` have passed."""
    result = Flood()
    sock.setblocking(False)
    deadline = time.monotonic() + seconds
    view = memoryview(data)
    offset = 0
    while time.monotonic() < deadline and result.sent < most:
        _, writable, _ = select.select([], [sock], [], 0.1)
        if not writable:
            continue
        try:
            sent = sock.send(view[offset:])
        except OSError:  # reset or broken pipe: the server is done with us
            result.cut = True
            break
        result.sent += sent
        offset = (offset + sent) % len(data)
    return result
