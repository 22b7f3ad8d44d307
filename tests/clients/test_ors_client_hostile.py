"""`ors-client` (in its own venv) against a hostile server: it keeps the key and secrets on its own origin and
holds no more of an answer than its documented bounds (`max_body_bytes`, `max_event_bytes`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.clients.hostile import (
    HostileServer,
    chunked,
    filler,
    raw,
    redirect,
    session_routes,
)

pytestmark = pytest.mark.clients

KEY = "the-api-key"  # as scripts/ors_client_hostile.py sends them
SECRET = "the-secret-value"
MB = 1024 * 1024


@pytest.fixture
def hostile(ors_client_python: Path, run_client: Callable[..., dict]) -> Callable[..., dict]:
    """`hostile(check, server, *options)`: what `ors_client_hostile.py check` reported against `server`."""

    def run(check: str, server: HostileServer, *options: str, timeout: float = 120) -> dict:
        return run_client(ors_client_python, "ors_client_hostile.py", check, server.url, *options, timeout=timeout)

    return run


def test_a_redirect_to_another_origin_is_not_followed_and_gets_no_key_or_secret(hostile) -> None:
    with HostileServer(session_routes("quiz")) as elsewhere:
        routes = {
            **session_routes("quiz"),
            ("POST", "/create"): redirect(307, "/moved/create"),
            ("POST", "/moved/create"): redirect(307, elsewhere.url + "/create"),
        }
        with HostileServer(routes) as server:
            result = hostile("redirect", server)

    assert result["create"]["error"] == "Redirected" and result["create"]["status"] == 307
    assert "another origin" in result["create"]["detail"]
    assert elsewhere.seen == [], "nothing reached the other origin: no key, no secrets, no body"
    (moved,) = server.requests_to("/moved/create")  # a redirect on the same origin is still followed
    assert moved.headers["X-API-Key"] == KEY and "X-Secrets" in moved.headers


def test_a_200_mb_body_is_refused_without_being_read(hostile) -> None:
    size = 200 * MB
    routes = {
        ("GET", "/list_environments"): raw(
            200, {"Content-Type": "application/json", "Content-Length": str(size)}, filler(size)
        ),
        ("POST", "/quiz/tasks"): raw(
            200, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}, chunked(filler(size))
        ),
    }
    with HostileServer(routes) as server:
        result = hostile("big_body", server)

    declared, streamed = result["declared"], result["chunked"]
    assert declared["error"] == streamed["error"] == "ResponseTooLarge", result
    assert "max_body_bytes" in declared["detail"] and f"declared {size} bytes" in declared["detail"]
    # A declared length past the bound is refused on the header; a chunked body is read up to the bound (64 MiB).
    assert declared["peak_rss_growth_mb"] < 16, result
    assert streamed["peak_rss_growth_mb"] < 64 + 48, result


def _long_line_routes(line: int, then: bytes) -> dict:
    stream = [
        b"event: task_id\ndata: t1\n\n",
        b'event: chunk\ndata: {"ok": true, "output": {"blocks": [{"type": "text", "text": "',
        *filler(line, b"a"),
        then,
    ]
    headers = {"Content-Type": "text/event-stream", "Connection": "close"}
    return {**session_routes("quiz"), ("POST", "/quiz/call"): raw(200, headers, stream)}


def test_a_40_mb_stream_line_fails_at_the_event_bound(hostile) -> None:
    with HostileServer(_long_line_routes(40 * MB, b"")) as server:
        result = hostile("long_line", server, timeout=60)

    assert result["call"]["error"] == "ResponseTooLarge", result
    assert "max_event_bytes" in result["call"]["detail"]


def test_a_40_mb_stream_line_within_a_raised_bound_is_read_whole(hostile) -> None:
    # Read as the pieces it came in and joined once: a line re-joined per chunk (quadratic) took minutes.
    end = b'"}]}}\n\nevent: end\ndata: \n\n'
    with HostileServer(_long_line_routes(40 * MB, end)) as server:
        result = hostile("long_line", server, "--max-event-bytes", str(48 * MB), timeout=60)

    assert result["call"]["value"] == 40 * MB, result
