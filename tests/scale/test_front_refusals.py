"""What the front refuses on headers alone, before it reads a body or routes anything: a missing API key (401
before 4 MiB a keyless client announces, and before a 404 / 410 / 503 could tell it which ids exist), and a
Host or Origin sent twice (400), each in the face's own shape, WebSocket handshakes included. And the web page's
login form (the front's 401 on /ui) and cookie, which the front accepts as the key, on its lookups too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ors_server.environments.math import TASKS
from ors_server.ids import WorkerTag
from ors_server.ui import CSP, auth
from tests.raw_http import exchange, head, websocket_head
from tests.scale.deployment import Deployment, deployment

KEY = "front-refusals-key"
LOOPBACK = ("Host", "127.0.0.1")
LOST = WorkerTag(0, 999).mint()  # an id of a worker incarnation that is gone: 410 for a client with the key
# (method, path, session header, the key of the face's error shape)
REQUESTS = [
    ("POST", "/create", "X-Session-ID", "detail"),
    ("POST", "/call", "X-Session-ID", "detail"),
    ("GET", "/control/reward", "mcp-session-id", "error"),
    ("POST", "/mcp", "mcp-session-id", "error"),
    ("POST", "/openenv/reset", None, "detail"),
    ("GET", "/metrics", None, "detail"),
]


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp: Path = tmp_path_factory.mktemp("front-refusals")
    # A front that remembers one session id: the next is found by asking the workers (the /ui cookie test).
    args = ("--log-level", "warning", "--front-directory-size", "1")
    with deployment(tmp, *args, env={"ORS_API_KEY": KEY}) as running:
        yield running


@pytest.mark.parametrize(("method", "path", "header", "shape"), REQUESTS, ids=[r[1] for r in REQUESTS])
def test_a_keyless_request_is_answered_401_by_the_front_before_its_body_is_sent(front, method, path, header, shape):
    # The head announces 4 MiB that never come: a front that read bodies before the key would wait for them
    # (and hold them: 150 such clients made it hold 699 MB).
    headers = [LOOPBACK, ("Content-Type", "application/json"), ("Content-Length", str(4 * 1024 * 1024))]
    answer = exchange(front.url, head(method, path, headers), timeout=10)
    assert answer.status == 401, answer
    assert shape in answer.json(), answer
    assert answer.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(("method", "path", "header", "shape"), REQUESTS, ids=[r[1] for r in REQUESTS])
def test_a_keyless_client_gets_the_same_401_for_a_lost_id_as_for_an_unknown_one(front, method, path, header, shape):
    answers = []
    for sid in (LOST, "never-was-a-session"):
        headers = {header: sid} if header else {}
        answers.append(httpx.request(method, front.url + path, json={}, headers=headers, timeout=10))
    assert [a.status_code for a in answers] == [401, 401], [a.text for a in answers]
    assert answers[0].json() == answers[1].json()
    assert shape in answers[0].json()


def test_with_the_key_a_lost_id_is_still_410(front):
    answer = httpx.post(front.url + "/call", json={}, headers={"X-Session-ID": LOST, "X-API-Key": KEY}, timeout=10)
    assert answer.status_code == 410, answer.text


def test_a_keyless_websocket_handshake_for_a_lost_id_is_refused_401_by_the_front(front):
    answer = exchange(front.url, websocket_head(f"/openenv/ws?session_id={LOST}", [LOOPBACK]))
    assert answer.status == 401, answer
    assert "detail" in answer.json()


@pytest.mark.parametrize("name", ["Host", "Origin"])
@pytest.mark.parametrize(("method", "path", "header", "shape"), REQUESTS, ids=[r[1] for r in REQUESTS])
def test_a_host_or_origin_sent_twice_is_refused_400_by_the_front(front, name, method, path, header, shape):
    twice = [(name, "127.0.0.1" if name == "Host" else "http://localhost")] * 2
    headers = [*([LOOPBACK] if name == "Origin" else []), *twice, ("X-API-Key", KEY), ("Content-Length", "2")]
    answer = exchange(front.url, head(method, path, headers) + b"{}")
    assert answer.status == 400, answer
    assert shape in answer.json(), answer


@pytest.mark.parametrize("name", ["Host", "Origin"])
def test_a_websocket_handshake_with_a_host_or_origin_sent_twice_is_refused_400_by_the_front(front, name):
    twice = [(name, "127.0.0.1" if name == "Host" else "http://localhost")] * 2
    headers = [*([LOOPBACK] if name == "Origin" else []), *twice, ("X-API-Key", KEY)]
    answer = exchange(front.url, websocket_head("/openenv/ws", headers))
    assert answer.status == 400, answer
    assert "duplicate" in answer.json()["detail"]


def test_the_front_serves_the_web_page_and_its_cookie_is_the_key_on_lookups_too(front: Deployment) -> None:
    # The login form is the front's own 401 on /ui; the login itself is a worker's; then the cookie alone plays.
    with httpx.Client(base_url=front.url, timeout=30) as client:
        refused = client.get("/ui")
        assert refused.status_code == 401 and 'action="/ui/login"' in refused.text
        assert refused.headers["content-security-policy"] == CSP
        assert client.post("/ui/login", data={"key": "nope"}).status_code == 401

        logged_in = client.post("/ui/login", data={"key": KEY, "next": "/ui/play"})
        assert logged_in.status_code == 303 and client.cookies.get(auth.COOKIE)
        assert client.get("/ui/play").status_code == 200

        # A front that remembers one session finds the other by asking the workers, with the page's cookie as
        # the key: two sessions, each called after the other pushed it out of the front's memory.
        sessions = []
        for index in (0, 1):
            sid = client.post("/create_session").json()["sid"]
            task = {"env_name": "math", "split": "train", "index": index}
            assert client.post("/create", headers={"X-Session-ID": sid}, json=task).status_code == 200
            sessions.append((sid, index))
        for sid, index in sessions:
            answer = {"name": "submit", "input": {"answer": str(TASKS["train"][index]["answer"])}}
            result = client.post("/math/call", headers={"X-Session-ID": sid}, json=answer)
            assert result.status_code == 200 and '"reward":1.0' in result.text, result.text
            assert client.post("/delete", headers={"X-Session-ID": sid}).status_code == 200
