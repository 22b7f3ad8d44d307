"""What a server refuses on a request's headers alone, before it reads a body: a Host or Origin header sent twice
(400: one check could read one value and a later reader the other), and a missing API key (401), each in the
face's own shape, WebSocket handshakes included."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.ors_envs import Live, live_server
from tests.raw_http import exchange, head, websocket_head

KEY = "header-refusals-key"
LOOPBACK = ("Host", "127.0.0.1")
# (method, path, the key of the face's error shape)
PATHS = [
    ("POST", "/create", "detail"),
    ("GET", "/control/reward", "error"),
    ("POST", "/mcp", "error"),
    ("POST", "/openenv/reset", "detail"),
    ("GET", "/metrics", "detail"),
    ("GET", "/health", "detail"),
]
DUPLICATES = {
    "two hosts": [LOOPBACK, ("Host", "attacker.example")],
    "the same host twice": [LOOPBACK, LOOPBACK],
    "two origins": [LOOPBACK, ("Origin", "http://localhost"), ("Origin", "http://attacker.example")],
}


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_server(api_key=KEY) as server:
        yield server


@pytest.mark.parametrize("duplicated", DUPLICATES.values(), ids=DUPLICATES.keys())
@pytest.mark.parametrize(("method", "path", "shape"), PATHS, ids=[p[1] for p in PATHS])
def test_a_host_or_origin_header_sent_twice_is_refused_with_400_in_the_faces_shape(
    live, duplicated, method, path, shape
):
    headers = [*duplicated, ("X-API-Key", KEY), ("Content-Type", "application/json"), ("Content-Length", "2")]
    answer = exchange(live.url, head(method, path, headers) + b"{}")
    assert answer.status == 400, answer
    assert shape in answer.json(), answer
    assert "duplicate" in answer.body.decode()


@pytest.mark.parametrize("duplicated", DUPLICATES.values(), ids=DUPLICATES.keys())
def test_a_websocket_handshake_with_a_host_or_origin_sent_twice_is_refused_with_400(live, duplicated):
    answer = exchange(live.url, websocket_head("/openenv/ws", [*duplicated, ("X-API-Key", KEY)]))
    assert answer.status == 400, answer
    assert "duplicate" in answer.json()["detail"]


def test_a_websocket_handshake_with_one_host_and_the_key_is_accepted(live):
    assert exchange(live.url, websocket_head("/openenv/ws", [LOOPBACK, ("X-API-Key", KEY)])).status == 101


@pytest.mark.parametrize(("method", "path", "shape"), PATHS[:-1], ids=[p[1] for p in PATHS[:-1]])
def test_a_keyless_request_is_answered_401_before_its_body_is_sent(live, method, path, shape):
    # The head announces 4 MiB that never come: the answer must not wait for them.
    headers = [LOOPBACK, ("Content-Type", "application/json"), ("Content-Length", str(4 * 1024 * 1024))]
    answer = exchange(live.url, head(method, path, headers), timeout=10)
    assert answer.status == 401, answer
    assert shape in answer.json(), answer


def test_a_refused_websocket_handshake_logs_no_error(live, caplog):
    # uvicorn logged "ASGI callable returned without completing handshake." for every refused handshake: a log
    # flood that any client without the key could cause.
    caplog.set_level(logging.INFO)
    for _ in range(3):
        assert exchange(live.url, websocket_head("/openenv/ws", [LOOPBACK])).status == 401
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
