"""What a client can make the server hold before any face runs: header bytes and the time to send a request.

Raw sockets, because these attacks are malformed or slow HTTP that no well-behaved client library sends.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.ors_envs import Live, live_server

LIMITS = {"max_header_bytes": 32 * 1024, "header_timeout": 1.0, "body_timeout": 1.0}


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_server(**LIMITS) as server:
        yield server


def connect(live: Live) -> socket.socket:
    address = urlsplit(live.url)
    sock = socket.create_connection((address.hostname, address.port), timeout=10)
    return sock


def read_until_closed(sock: socket.socket, deadline: float, trickle: bytes = b"") -> bytes:
    """Everything the server sends until it closes the connection, sending `trickle` a byte at a time meanwhile.

    Fails if the server still holds the connection `deadline` seconds from now."""
    received = b""
    give_up = time.monotonic() + deadline
    sock.settimeout(0.25)
    while time.monotonic() < give_up:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            if trickle:
                try:
                    sock.sendall(trickle[:1])
                except OSError:
                    return received
                trickle = trickle[1:] or trickle
            continue
        except ConnectionResetError:
            return received
        if not data:
            return received
        received += data
    pytest.fail(f"the server still held the connection after {deadline} s; it sent {received[:200]!r}")


def status_and_body(response: bytes) -> tuple[int, dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_header_block_over_the_limit_is_refused_with_431_and_the_connection_closed(live):
    sock = connect(live)
    with sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: " + b"a" * (1024 * 1024) + b"\r\n\r\n")
        status, body = status_and_body(read_until_closed(sock, deadline=20))
    assert status == 431
    assert "header" in body["detail"]


def test_an_endless_header_is_cut_off_near_the_limit_not_buffered(live):
    # Before the limit the server read on (httptools growing the header by concatenation) for as long as the
    # client sent; now it answers 431 and stops reading soon after.
    sock = connect(live)
    give_up = time.monotonic() + 30
    with sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ")
        with pytest.raises(OSError):
            while time.monotonic() < give_up:
                sock.sendall(b"a" * 65536)
    assert time.monotonic() < give_up, "the server kept reading a header far past its limit"


def test_the_error_shape_follows_the_face_of_the_refused_path(live):
    sock = connect(live)
    with sock:
        sock.sendall(b"GET /control/reward HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: " + b"a" * 100_000 + b"\r\n\r\n")
        status, body = status_and_body(read_until_closed(sock, deadline=20))
    assert status == 431
    assert "error" in body


def test_headers_under_the_limit_are_served(live):
    response = live.client.get("/health", headers={"X-Filler": "a" * (24 * 1024)})
    assert response.status_code == 200


def test_a_client_trickling_its_headers_is_closed_after_the_header_timeout(live):
    sock = connect(live)
    with sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        response = read_until_closed(sock, deadline=20, trickle=b"X-Slow: " + b"a" * 1000)
    assert response.startswith(b"HTTP/1.1 408 ")


def test_a_connection_that_never_sends_a_byte_is_closed_after_the_header_timeout(live):
    sock = connect(live)
    with sock:
        assert read_until_closed(sock, deadline=20) == b""


def test_a_client_trickling_its_body_is_answered_408_after_the_body_timeout(live):
    sock = connect(live)
    with sock:
        sock.sendall(
            b"POST /create HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000\r\nX-Session-ID: slow-body\r\n\r\n{"
        )
        status, body = status_and_body(read_until_closed(sock, deadline=20, trickle=b'"a": 1, '))
    assert status == 408
    assert "body" in body["detail"]
    assert live.client.get("/health").status_code == 200


def test_a_keep_alive_connection_serves_many_requests_each_within_the_timeouts(live):
    # The timeouts bound one request's arrival, not the connection's life: 3 s of requests on one connection.
    with httpx.Client(base_url=live.url, timeout=10) as client:
        ended = time.monotonic() + 3
        while time.monotonic() < ended:
            assert client.get("/health").status_code == 200
            assert client.post("/create", json={"env_name": "nope"}, headers={"X-Session-ID": "ka"}).status_code == 422


@pytest.fixture(scope="module")
def uneven() -> Iterator[Live]:
    # One timer per connection checks both clocks: a body clock must not fire at the (shorter) header timeout,
    # and a header clock started right after a body's must not wait for the (longer) body timeout.
    with live_server(max_header_bytes=32 * 1024, header_timeout=0.5, body_timeout=3.0) as server:
        yield server


def test_a_body_gets_the_body_timeout_even_when_the_header_timeout_is_shorter(uneven):
    sock = connect(uneven)
    with sock:
        sock.sendall(
            b"POST /create HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000\r\nX-Session-ID: slow-body\r\n\r\n{"
        )
        started = time.monotonic()
        status, body = status_and_body(read_until_closed(sock, deadline=20, trickle=b'"a": 1, '))
    assert status == 408 and "body" in body["detail"]
    assert time.monotonic() - started >= 2.9


def test_the_next_request_on_a_connection_gets_the_header_timeout_not_the_body_timeout(uneven):
    sock = connect(uneven)
    with sock:
        body = b'{"env_name": "nope"}'
        sock.sendall(
            b"POST /create HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Session-ID: ka\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 422 ")
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        started = time.monotonic()
        response = read_until_closed(sock, deadline=20, trickle=b"X-Slow: " + b"a" * 1000)
    assert response.startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - started < 2.5, "the header clock waited for the body timeout"
