"""DNS rebinding: a web page whose name resolves to the server's address must not reach any face.

Before, with no key on loopback (the default), a request with `Host: attacker.example` got 200 from ORS
`/create` and `/call`, the control plane and `/metrics`; only MCP answered 421. A page could so run shell
commands on a developer's machine. Now every face refuses a Host outside the allowed list with 421, and a
browser's Origin outside it with 403 (what the MCP SDK answers), each in the face's own error shape.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from ors_server.http.app import FACES, create_app
from ors_server.settings import Settings
from tests.faces.mcp_helpers import ACCEPT, INIT_PARAMS
from tests.faces.test_plugins import toy
from tests.ors_envs import ENVS, Live, create, live_server

STRANGER = "attacker.example"
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {**INIT_PARAMS, "clientInfo": {"name": "x"}}}

# (session header: a new id, a live session's or none; method, path, json body, the key of the face's error shape)
REQUESTS = [
    ("new", "POST", "/create", {"env_name": "mathlike", "task_spec": {"question": "1+1", "answer": "2"}}, "detail"),
    ("X-Session-ID", "POST", "/call", {"name": "submit", "input": {"answer": "2"}}, "detail"),
    (None, "GET", "/list_environments", None, "detail"),
    ("mcp-session-id", "GET", "/control/reward", None, "error"),
    (None, "POST", "/mcp", INITIALIZE, "error"),
    (None, "GET", "/metrics", None, "detail"),
]


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_server(allowed_hosts=("envs.internal:8000",)) as server:
        yield server


def send(live: Live, session: str | None, method: str, path: str, body: Any, **headers: str) -> httpx.Response:
    if session == "new":
        headers["X-Session-ID"] = f"rebind-{uuid.uuid4().hex}"
    elif session is not None:
        headers[session] = create(live.client)
    return live.client.request(method, path, json=body, headers={**ACCEPT, **headers})


@pytest.mark.parametrize(("session", "method", "path", "body", "shape"), REQUESTS, ids=[r[2] for r in REQUESTS])
def test_a_host_outside_the_allowed_list_is_421_on_every_face(live, session, method, path, body, shape):
    refused = send(live, session, method, path, body, host=STRANGER)
    assert refused.status_code == 421, refused.text
    assert shape in refused.json()


@pytest.mark.parametrize(("session", "method", "path", "body", "shape"), REQUESTS, ids=[r[2] for r in REQUESTS])
def test_a_browser_origin_outside_the_allowed_list_is_403_on_every_face(live, session, method, path, body, shape):
    refused = send(live, session, method, path, body, origin=f"http://{STRANGER}")
    assert refused.status_code == 403, refused.text
    assert shape in refused.json()
    assert send(live, session, method, path, body, origin="null").status_code == 403


@pytest.mark.parametrize(("session", "method", "path", "body", "shape"), REQUESTS, ids=[r[2] for r in REQUESTS])
def test_loopback_names_any_port_and_allowed_hosts_are_served(live, session, method, path, body, shape):
    for host, origin in [
        ("localhost:1234", "http://localhost:5173"),
        ("127.0.0.1", "https://127.0.0.1:8443"),
        ("[::1]:8000", "http://[::1]:3000"),
        ("envs.internal:8000", "http://envs.internal:8000"),
        ("ENVS.INTERNAL:8000", None),
    ]:
        headers = {"host": host} | ({"origin": origin} if origin else {})
        answered = send(live, session, method, path, body, **headers)
        assert answered.status_code < 400, (host, origin, answered.status_code, answered.text)


def test_the_421_names_the_flag_and_the_host_to_add(live):
    refused = send(live, None, "GET", "/list_environments", None, host="envs.public:8000")
    assert refused.json()["detail"] == (
        "Invalid Host header: this server answers only loopback names, its --host address and every "
        "--allowed-host; to accept this one, start it with --allowed-host envs.public:8000"
    )
    mangled = send(live, None, "GET", "/list_environments", None, host="evil.example/<b>")
    assert mangled.json()["detail"].endswith("start it with --allowed-host HOST[:PORT]")


def test_an_allowed_name_on_another_port_is_refused(live):
    assert send(live, None, "GET", "/list_environments", None, host="envs.internal:9999").status_code == 421


def test_health_stays_open_to_load_balancers_probing_by_address(live):
    assert live.client.get("/health", headers={"host": "10.1.2.3:8000"}).status_code == 200


def test_a_websocket_from_a_stranger_host_or_origin_is_refused():
    app = create_app(ENVS, Settings(), faces=[toy, *FACES])
    with TestClient(app, base_url="http://localhost") as client:
        with client.websocket_connect("ws://localhost/toy/ws") as ws:
            ws.send_json({"a": 1})
            assert ws.receive_json() == {"echo": {"a": 1}}
        for headers in ({"host": STRANGER}, {"origin": f"http://{STRANGER}"}):
            with (
                pytest.raises(WebSocketDisconnect) as refused,
                client.websocket_connect("ws://localhost/toy/ws", headers=headers),
            ):
                pass
            assert refused.value.code == 1008
