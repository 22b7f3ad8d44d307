"""HTTP/1.1 and WebSocket handshakes over a plain socket, for what httpx will not send: a header twice, a request
head whose body never follows, a client that floods and never reads."""

from __future__ import annotations

import base64
import json
import os
import socket
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
    """One masked client frame (a client must mask), payload under 126 bytes."""
    assert len(payload) < 126
    mask = os.urandom(4)
    masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked
