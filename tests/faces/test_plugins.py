"""Faces are plug-ins: a face declared in one module, added to the list, gets its routes (HTTP and WebSocket,
under its own prefix), its lifespan, and every error, middleware refusals included, in its own shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocket

from ors_server.errors import OrsError
from ors_server.faces import Core, Face, FaceTable
from ors_server.http.app import FACES, create_app
from ors_server.settings import Settings
from tests.ors_envs import MathLike

KEY = {"X-API-Key": "sesame"}
LIFESPAN: list[str] = []


def toy_error(exc: OrsError) -> Response:
    return JSONResponse({"toy_error": exc.message}, exc.status, headers=exc.headers)


async def hello(request: Request) -> Response:
    return JSONResponse({"hello": request.path_params.get("env", "default")})


async def session(request: Request) -> Response:
    store = request.app.state.store
    found = store.get(request.path_params["sid"])  # raises SessionNotFound for an unknown id
    return JSONResponse({"env": found.env_name})


async def upload(request: Request) -> Response:
    return JSONResponse({"size": len(await request.body())})


async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_json({"echo": await websocket.receive_json()})
    await websocket.close()


def toy(core: Core) -> Face:
    inner = [
        Route("/hello", hello),
        Route("/upload", upload, methods=["POST"]),
        WebSocketRoute("/ws", echo),
    ]

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        LIFESPAN.append("start")
        try:
            yield
        finally:
            LIFESPAN.append("stop")

    routes = [Route("/toy-session/{sid}", session), Mount("/toy/{env}", routes=inner), Mount("/toy", routes=inner)]
    return Face("toy", routes, toy_error, lifespan=lifespan, state={"toy": "here"})


@pytest.fixture
def client():
    LIFESPAN.clear()
    app = create_app([MathLike], Settings(api_key="sesame", max_body_bytes=100), faces=[toy, *FACES])
    with TestClient(app, base_url="http://localhost") as test_client:
        yield test_client
    assert LIFESPAN == ["start", "stop"]


def test_a_face_added_to_the_list_serves_its_routes_under_its_prefix_and_runs_its_lifespan(client):
    assert LIFESPAN == ["start"]
    assert client.get("/toy/hello", headers=KEY).json() == {"hello": "default"}
    assert client.get("/toy/mathlike/hello", headers=KEY).json() == {"hello": "mathlike"}
    assert client.app.state.toy == "here"


def test_a_face_serves_websocket_routes(client):
    with client.websocket_connect("ws://localhost/toy/ws", headers=KEY) as ws:
        ws.send_json({"a": 1})
        assert ws.receive_json() == {"echo": {"a": 1}}


def test_a_websocket_without_the_api_key_is_refused_in_the_faces_shape(client):
    with pytest.raises(WebSocketDenialResponse) as refused, client.websocket_connect("ws://localhost/toy/ws"):
        pass
    assert refused.value.status_code == 401
    assert refused.value.json() == {"toy_error": "missing or wrong API key"}
    assert refused.value.headers["www-authenticate"] == "Bearer"


def test_a_face_renders_domain_errors_its_handlers_raise(client):
    response = client.get("/toy-session/nobody", headers=KEY)
    assert response.status_code == 404
    assert response.json() == {"toy_error": "Active environment not found"}


def test_middleware_refusals_come_in_the_face_of_the_request(client):
    unauthorized = client.get("/toy/hello")
    assert unauthorized.status_code == 401 and unauthorized.json() == {"toy_error": "missing or wrong API key"}
    assert unauthorized.headers["www-authenticate"] == "Bearer"
    too_large = client.post("/toy/upload", content=b"x" * 101, headers=KEY)
    assert too_large.status_code == 413 and "toy_error" in too_large.json()
    wrong_method = client.get("/toy/upload", headers=KEY)
    assert wrong_method.status_code == 405 and "toy_error" in wrong_method.json()


def test_the_other_faces_keep_their_own_shapes(client):
    assert client.get("/splits").json() == {"detail": "missing or wrong API key"}
    assert client.get("/control/reward").json() == {"error": "missing or wrong API key"}
    mcp = client.post("/mcp", json={})
    assert mcp.status_code == 401 and mcp.json()["error"]["message"] == "missing or wrong API key"
    assert client.post("/control/reward", headers=KEY).json() == {"error": "Method Not Allowed"}
    assert client.get("/no/such/path", headers=KEY).json() == {"detail": "Not Found"}


def test_a_path_is_served_by_the_first_face_that_claims_it_and_answered_in_that_faces_shape(client):
    # `/toy/mcp` also fits MCP's `/{env}/mcp`, but the toy face (first in the list) claims everything under
    # `/toy`: the face that serves a request and the face whose shape its errors take are one and the same.
    missing = client.post("/toy/mcp", json={}, headers=KEY)
    assert missing.status_code == 404 and missing.json() == {"toy_error": "Not Found"}


def test_a_path_one_slash_away_from_a_route_is_redirected_by_that_routes_face(client):
    # As Starlette's router redirects them; the path itself names no face, its neighbour does.
    for path, target in [("/control/reward/", "/control/reward"), ("/mathlike/prompt/", "/mathlike/prompt")]:
        moved = client.get(path, headers=KEY, follow_redirects=False)
        assert moved.status_code == 307 and moved.headers["location"].endswith(target), (path, moved.headers)


def test_request_metrics_carry_the_face_name(client):
    client.get("/toy/hello", headers=KEY)
    metrics = client.get("/metrics", headers=KEY).text
    assert 'ors_request_seconds_count{face="toy"} 1.0' in metrics


def test_a_face_table_refuses_two_faces_of_one_name():
    face = Face("twin", [], toy_error)
    with pytest.raises(ValueError, match="share a name"):
        FaceTable([face, face])
