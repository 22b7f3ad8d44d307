"""A client that goes away in the middle of sending its request is not a server error.

Before: Starlette's `ClientDisconnect` escaped to uvicorn, which logged ~2 KB of traceback per client and
counted a 500; 600 slow clients flooded the log. Now the access line says 499 (nginx's "client closed
request"), `ors_requests_total` counts the request as `client_disconnected`, and nothing is logged as an error.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.ors_envs import Live, create, live_server
from tests.reliability.test_observability import samples, value


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_server(log_level="info") as server:
        yield server


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The server's access log and uvicorn's error log while the test runs."""
    caplog.set_level(logging.INFO, logger="ors_server.access")
    uvicorn_errors = logging.getLogger("uvicorn.error")
    uvicorn_errors.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        uvicorn_errors.removeHandler(caplog.handler)


def send_half_a_body_and_hang_up(live: Live, path: str, headers: dict[str, str]) -> None:
    address = urlsplit(live.url)
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", "Content-Length: 1000"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + b'{"name": "sub')
        time.sleep(0.2)  # let the server start reading the body before the hang-up (not a wait for a result)


def access_line(logs: pytest.LogCaptureFixture, path: str, session: str) -> str:
    """The access-log line of the request, once it is written (bounded wait)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for record in logs.records:
            message = record.getMessage()
            if record.name == "ors_server.access" and f"path={path} " in message and f"session={session}" in message:
                return message
        time.sleep(0.05)
    pytest.fail(f"no access line for {path}")


@pytest.mark.parametrize(
    ("face", "path", "header"),
    [
        ("ors", "/create", "X-Session-ID"),
        ("ors", "/call", "X-Session-ID"),
        ("control", "/control/reset_session", "mcp-session-id"),
    ],
)
def test_a_client_hanging_up_mid_body_is_counted_apart_and_logs_no_error(live, logs, face, path, header):
    sid = create(live.client) if path == "/call" else f"gone-{uuid.uuid4().hex}"
    before = samples(live.client)
    send_half_a_body_and_hang_up(live, path, {header: sid})
    line = access_line(logs, path, sid)
    assert "status=499" in line.split(), line
    after = samples(live.client)
    grew = value(after, "ors_requests_total", face=face, outcome="client_disconnected") - value(
        before, "ors_requests_total", face=face, outcome="client_disconnected"
    )
    assert grew == 1
    assert value(after, "ors_requests_total", face=face, outcome="5xx") == value(
        before, "ors_requests_total", face=face, outcome="5xx"
    )
    assert [r.getMessage() for r in logs.records if r.levelno >= logging.ERROR] == []
    assert live.client.get("/health").status_code == 200


def test_requests_are_counted_by_face_and_status_class(live):
    before = samples(live.client)
    assert live.client.get("/health").status_code == 200
    assert live.client.post("/create", json={"env_name": "nope"}, headers={"X-Session-ID": "x"}).status_code == 422
    after = samples(live.client)
    for outcome in ("2xx", "4xx"):
        key = {"face": "ors", "outcome": outcome}
        assert value(after, "ors_requests_total", **key) > value(before, "ors_requests_total", **key)
