"""ORS client mistakes over real HTTP: every one is a 4xx with a JSON `detail`, never a 5xx
(checklist 11, 28, 33 and the session-id addenda)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ors_envs import count, create, live_server, math_task, new_tag, sid_header

SESSION_ENDPOINTS = [
    ("POST", "/create", {"task_spec": math_task()}),
    ("POST", "/ping", None),
    ("POST", "/delete", None),
    ("POST", "/delete_session", None),
    ("GET", "/mathlike/prompt", None),
    ("GET", "/mathlike/task_tools", None),
    ("POST", "/mathlike/call", {"name": "noargs", "input": {}}),
    ("GET", "/prompt", None),
    ("GET", "/task_tools", None),
    ("POST", "/call", {"name": "noargs", "input": {}}),
]
LOOKUP_ENDPOINTS = [
    ("POST", "/ping", None),
    ("GET", "/mathlike/prompt", None),
    ("GET", "/mathlike/task_tools", None),
    ("POST", "/mathlike/call", {"name": "noargs", "input": {}}),
    ("GET", "/prompt", None),
    ("POST", "/call", {"name": "noargs", "input": {}}),
]
SSE = {"Accept": "text/event-stream"}


def assert_json_detail(response: httpx.Response, status: int, detail: str | None = None) -> None:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"detail"}, body
    assert isinstance(body["detail"], str)
    if detail is not None:
        assert body["detail"] == detail


@pytest.mark.parametrize(("method", "path", "body"), SESSION_ENDPOINTS)
def test_a_session_endpoint_without_x_session_id_answers_400(
    client: httpx.Client, method: str, path: str, body: object
) -> None:
    response = client.request(method, path, json=body, headers=SSE)
    assert_json_detail(response, 400, "X-Session-ID header is required")


@pytest.mark.parametrize(("method", "path", "body"), LOOKUP_ENDPOINTS)
def test_an_unknown_session_answers_404_active_environment_not_found(
    client: httpx.Client, method: str, path: str, body: object
) -> None:
    response = client.request(method, path, json=body, headers={**SSE, **sid_header("never-created")})
    assert_json_detail(response, 404, "Active environment not found")


@pytest.mark.parametrize(("method", "path", "body"), LOOKUP_ENDPOINTS)
def test_a_deleted_session_answers_410_session_deleted(
    client: httpx.Client, method: str, path: str, body: object
) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    assert client.post("/delete", headers=sid_header(sid)).status_code == 200
    response = client.request(method, path, json=body, headers={**SSE, **sid_header(sid)})
    assert_json_detail(response, 410, "Session deleted")
    assert count(tag, "noargs") == 0


def test_a_deleted_session_id_can_be_created_again(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    client.post("/delete", headers=sid_header(sid))
    create(client, math_task(1), sid=sid)
    assert client.get("/prompt", headers=sid_header(sid)).json()[0]["text"] == "What is 3*3?"


@pytest.mark.parametrize(
    "sid",
    ["x" * 10_240, "x" * 129, "has space", "slash/es", "qu?ery", "semi;colon", "comma,", "tab\tinside", "é-latin1"],
    ids=["10KB", "129", "space", "slash", "question", "semicolon", "comma", "tab", "latin1"],
)
@pytest.mark.parametrize(("method", "path", "body"), SESSION_ENDPOINTS)
def test_a_malformed_session_id_answers_400(
    client: httpx.Client, method: str, path: str, body: object, sid: str
) -> None:
    response = client.request(
        method, path, json=body, headers=[("Accept", "text/event-stream"), ("X-Session-ID", sid.encode("latin-1"))]
    )
    assert_json_detail(response, 400)


@pytest.mark.parametrize(("method", "path", "body"), SESSION_ENDPOINTS)
def test_a_non_utf8_session_id_answers_400(client: httpx.Client, method: str, path: str, body: object) -> None:
    headers = [(b"Accept", b"text/event-stream"), (b"X-Session-ID", b"\xff\xfe\xc3(")]
    response = client.request(method, path, json=body, headers=headers)
    assert_json_detail(response, 400)


def test_a_session_id_of_128_allowed_characters_is_accepted(client: httpx.Client) -> None:
    sid = ("Az09_.:-" * 16)[:128]
    create(client, math_task(0), sid=sid)
    assert client.post("/ping", headers=sid_header(sid)).json() == {"status": "ok"}


def test_an_unknown_environment_on_a_session_path_answers_404(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    response = client.get("/nosuch/prompt", headers=sid_header(sid))
    assert_json_detail(response, 404, "unknown environment 'nosuch'")


# Bodies


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/mathlike/tasks", {}),
        ("/mathlike/tasks", {"split": 3}),
        ("/mathlike/num_tasks", {}),
        ("/mathlike/task", {"split": "train"}),
        ("/mathlike/task", {"split": "train", "index": "zero"}),
        ("/mathlike/task_range", {"split": "train", "start": "a"}),
        ("/mathlike/tasks", ["train"]),
        ("/mathlike/tasks", "train"),
    ],
)
def test_an_invalid_discovery_body_answers_422_with_a_fastapi_like_list(
    client: httpx.Client, path: str, body: object
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail
    assert all({"type", "loc", "msg"} <= set(error) for error in detail), detail


@pytest.mark.parametrize(
    "body",
    [{}, {"input": {}}, {"name": 3, "input": {}}, {"name": "noargs", "input": "text"}, ["noargs"], {"name": "noargs"}],
    ids=["empty", "no-name", "name-not-str", "input-not-object", "list", "no-input"],
)
def test_an_invalid_call_body_answers_422_before_any_stream(client: httpx.Client, body: object) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    response = client.post("/mathlike/call", json=body, headers={**SSE, **sid_header(sid)})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert isinstance(response.json()["detail"], list)
    assert count(tag, "noargs") == 0


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/mathlike/tasks"), ("POST", "/create"), ("POST", "/mathlike/call")],
)
def test_malformed_json_answers_a_4xx_with_a_detail(client: httpx.Client, method: str, path: str) -> None:
    sid = create(client, math_task(0))
    headers = {**SSE, **(sid_header(sid) if path != "/create" else sid_header(f"new-{new_tag()}"))}
    response = client.request(
        method, path, content=b'{"split": "tr', headers={**headers, "Content-Type": "application/json"}
    )
    assert 400 <= response.status_code < 500, response.text
    assert "detail" in response.json()


# Routing


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/a/b/c"), ("GET", "/mathlike/nosuch"), ("POST", "/nosuch/call/extra"), ("GET", "/mathlike/tools/x")],
)
def test_an_unknown_route_answers_404_json(client: httpx.Client, method: str, path: str) -> None:
    response = client.request(method, path)
    assert response.status_code == 404
    assert isinstance(response.json()["detail"], str)


@pytest.mark.parametrize(("method", "path"), [("GET", "/create"), ("GET", "/mathlike/call"), ("DELETE", "/ping")])
def test_a_wrong_method_answers_405_json(client: httpx.Client, method: str, path: str) -> None:
    response = client.request(method, path, headers=sid_header("any"))
    assert response.status_code == 405
    assert isinstance(response.json()["detail"], str)


# Nothing a client sends costs a 5xx


@pytest.fixture(scope="module")
def fuzz_client() -> Iterator[httpx.Client]:
    with live_server() as server:
        create(server.client, math_task(0), sid="fuzz-live")
        yield server.client


HEADER_TEXT = st.text(st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=300)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sid=HEADER_TEXT, endpoint=st.sampled_from(SESSION_ENDPOINTS))
def test_no_session_id_costs_a_5xx(fuzz_client: httpx.Client, sid: str, endpoint: tuple) -> None:
    method, path, body = endpoint
    if path == "/create":
        body = {"task_spec": math_task(0)}
    headers = [(b"Accept", b"text/event-stream"), (b"X-Session-ID", sid.encode("latin-1"))]
    response = fuzz_client.request(method, path, json=body, headers=headers)
    assert response.status_code < 500, (response.status_code, response.text)
    if response.status_code >= 400:
        assert "detail" in response.json()


@pytest.mark.parametrize(("method", "path", "body"), SESSION_ENDPOINTS)
def test_an_empty_session_id_answers_400(client: httpx.Client, method: str, path: str, body: object) -> None:
    response = client.request(method, path, json=body, headers={**SSE, "X-Session-ID": ""})
    assert_json_detail(response, 400)


def test_create_beyond_max_sessions_answers_503_with_retry_after() -> None:
    with live_server(max_sessions=2) as live:
        create(live.client, math_task(0))
        create(live.client, math_task(0))
        response = live.client.post("/create", json={"task_spec": math_task(0)}, headers=sid_header("third"))
        assert_json_detail(response, 503)
        assert int(response.headers["retry-after"]) >= 1
        assert live.client.post("/ping", headers=sid_header("third")).status_code == 404
