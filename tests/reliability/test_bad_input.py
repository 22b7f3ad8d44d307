"""Bad input over real HTTP on every face: a 4xx in the face's own error shape, never a 5xx or a hang.

Every case is followed by a normal ORS episode and a normal MCP + control-plane episode on the same server,
so a case that cost the server its health fails where it happened.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from ors_server.environments import BUILTIN_ENVIRONMENTS
from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.reliability.reliability_envs import ACCEPT_MCP, initialize_body, mcp_call, mcp_open, ors_call, ors_result
from tests.serving import serve

MIB = 1024 * 1024
HUGE = 20 * MIB
LONG_ID = "s" * 10_000
NOT_UTF8 = b"\xff\xfe\xfa"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serve(create_app(BUILTIN_ENVIRONMENTS, Settings())) as url:
        yield url


@pytest.fixture
def client(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=15) as http:
        yield http


def sid() -> str:
    return f"bad-{uuid.uuid4().hex}"


def ors_episode(client: httpx.Client) -> None:
    """create_session, create, prompt, call, delete on `math`."""
    session = client.post("/create_session").json()["sid"]
    headers = {"X-Session-ID": session}
    created = client.post("/create", json={"env_name": "math", "split": "train", "index": 1}, headers=headers)
    assert created.status_code == 200, created.text
    assert client.get("/math/prompt", headers=headers).status_code == 200
    result = ors_result(ors_call(client, session, "submit", {"answer": "21"}, "math"))
    assert result["ok"] and result["output"]["reward"] == 1.0 and result["output"]["finished"]
    assert client.post("/delete", headers=headers).status_code == 200


def mcp_episode(client: httpx.Client) -> None:
    """An Eval-Protocol-shaped FrozenLake episode: initialize with `_extra`, a move, reward, status, DELETE."""
    key = uuid.uuid4().hex
    transport = mcp_open(client, "/frozen_lake/mcp/", {"session_id": key, "seed": 42})
    result = mcp_call(client, "/frozen_lake/mcp/", transport, "lake_move", {"action": "RIGHT"})
    assert not result["isError"] and json.loads(result["content"][0]["text"])["position"] == 1
    control = {"mcp-session-id": key}
    assert client.get("/frozen_lake/control/reward", headers=control).json() == {"reward": 0.0, "step_count": 1}
    assert client.get("/frozen_lake/control/status", headers=control).json()["terminated"] is False
    gone = client.delete("/frozen_lake/mcp/", headers={**ACCEPT_MCP, "mcp-session-id": transport})
    assert gone.status_code in (200, 204), gone.text
    assert client.get("/frozen_lake/control/reward", headers=control).status_code == 404


def assert_face_error(response: httpx.Response, face: str, in_session: bool = False) -> None:
    """A 4xx JSON body in the face's shape; inside a live MCP session a JSON-RPC error may ride on a 200."""
    low = 200 if in_session else 400
    assert low <= response.status_code < 500 and response.status_code not in range(201, 400), (
        response.status_code,
        response.text[:500],
    )
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    if face == "ors":
        assert "detail" in body, body
    elif face == "control":
        assert isinstance(body.get("error"), str), body
    else:
        assert body.get("jsonrpc") == "2.0" and isinstance(body["error"]["code"], int), body
        assert isinstance(body["error"]["message"], str), body


def chunked(size: int, piece: bytes = b"a") -> Iterator[bytes]:
    """A body of `size` bytes sent without Content-Length (chunked transfer encoding)."""
    block = piece * MIB
    for _ in range(size // MIB):
        yield block


@dataclass(frozen=True)
class Case:
    id: str
    face: str
    send: Callable[[httpx.Client], httpx.Response]
    status: int | tuple[int, ...] | None = None
    """The exact status expected, when the protocol pins one; otherwise any 4xx."""
    in_session: bool = False


def post(path: str, **kwargs: Any) -> Callable[[httpx.Client], httpx.Response]:
    return lambda client: client.post(path, **kwargs)


def get(path: str, **kwargs: Any) -> Callable[[httpx.Client], httpx.Response]:
    return lambda client: client.get(path, **kwargs)


def sid_headers(value: str | bytes | None = None) -> dict[str, Any]:
    return {"X-Session-ID": value if value is not None else sid()}


def mcp_post(body: Any = None, content: bytes | None = None, path: str = "/mcp/", **headers: Any):
    def send(client: httpx.Client) -> httpx.Response:
        all_headers = {**ACCEPT_MCP, **headers}
        if content is not None:
            return client.post(path, content=content, headers=all_headers)
        return client.post(path, json=body, headers=all_headers)

    return send


def in_mcp_session(body: dict[str, Any]) -> Callable[[httpx.Client], httpx.Response]:
    """Open a transport on `/frozen_lake/mcp/`, send `body` in it, close it; returns the answer to `body`."""

    def send(client: httpx.Client) -> httpx.Response:
        transport = mcp_open(client, "/frozen_lake/mcp/", {"session_id": uuid.uuid4().hex})
        headers = {**ACCEPT_MCP, "mcp-session-id": transport}
        try:
            return client.post("/frozen_lake/mcp/", json=body, headers=headers)
        finally:
            client.delete("/frozen_lake/mcp/", headers=headers)

    return send


def control(path: str, key: str | bytes | None, method: str = "GET", **kwargs: Any):
    headers = {} if key is None else {"mcp-session-id": key}
    return lambda client: client.request(method, path, headers=headers, **kwargs)


ORS_CASES = [
    Case("malformed json on create", "ors", post("/create", content=b'{"task_spec": ', headers=sid_headers()), 422),
    Case("malformed json on call", "ors", post("/math/call", content=b"{name: submit}", headers=sid_headers()), 422),
    Case(
        "wrong types on create",
        "ors",
        post("/create", json={"env_name": 5, "task_spec": []}, headers=sid_headers()),
        422,
    ),
    Case("wrong types on task", "ors", post("/math/task", json={"split": ["train"], "index": "zero"}), 422),
    Case("array body on num_tasks", "ors", post("/math/num_tasks", json=["train"]), 422),
    Case("unknown field on tasks", "ors", post("/math/tasks", json={"split": "train", "evil": 1}), 422),
    Case("missing split on tasks", "ors", post("/math/tasks", json={}), 422),
    Case("missing index on task", "ors", post("/math/task", json={"split": "train"}), 422),
    Case("neither task form on create", "ors", post("/create", json={"env_name": "math"}, headers=sid_headers()), 422),
    Case("missing tool name on call", "ors", post("/math/call", json={"input": {}}, headers=sid_headers()), 422),
    Case("non-utf8 body on create", "ors", post("/create", content=NOT_UTF8, headers=sid_headers()), 422),
    Case("non-utf8 body on tasks", "ors", post("/math/tasks", content=b'{"split": "\xff"}'), 422),
    Case("non-utf8 session id on create", "ors", post("/create", json={}, headers=sid_headers(NOT_UTF8)), 400),
    Case("non-utf8 session id on ping", "ors", post("/ping", headers=sid_headers(NOT_UTF8)), 400),
    Case("non-utf8 session id on prompt", "ors", get("/math/prompt", headers=sid_headers(NOT_UTF8)), 400),
    Case(
        "non-utf8 session id on call",
        "ors",
        post("/call", json={"name": "submit", "input": {}}, headers=sid_headers(NOT_UTF8)),
        400,
    ),
    Case("missing session id on call", "ors", post("/math/call", json={"name": "submit", "input": {}}), 400),
    Case(
        "10 KB session id on create", "ors", post("/create", json={"task_spec": {}}, headers=sid_headers(LONG_ID)), 400
    ),
    Case("10 KB session id on ping", "ors", post("/ping", headers=sid_headers(LONG_ID)), 400),
    Case("20 MiB body on create", "ors", post("/create", content=b"a" * HUGE, headers=sid_headers()), 413),
    Case("20 MiB chunked body on create", "ors", post("/create", content=chunked(HUGE), headers=sid_headers()), 413),
    Case("20 MiB chunked body on call", "ors", post("/math/call", content=chunked(HUGE), headers=sid_headers()), 413),
    Case("unknown environment on tools", "ors", get("/nope/tools"), 404),
    Case(
        "unknown environment on call",
        "ors",
        post("/nope/call", json={"name": "x", "input": {}}, headers=sid_headers()),
        404,
    ),
    Case(
        "unknown environment on create",
        "ors",
        post("/create", json={"env_name": "nope", "task_spec": {}}, headers=sid_headers()),
        404,
    ),
    Case("unknown split", "ors", post("/math/tasks", json={"split": "nope"}), 400),
    Case("index out of range", "ors", post("/math/task", json={"split": "train", "index": 10**9}), 400),
    Case("unknown session on prompt", "ors", get("/math/prompt", headers=sid_headers()), 404),
    Case(
        "unknown session on call",
        "ors",
        post("/math/call", json={"name": "submit", "input": {}}, headers=sid_headers()),
        404,
    ),
    Case(
        "garbage X-Secrets",
        "ors",
        post("/create", json={"task_spec": {}}, headers={**sid_headers(), "X-Secrets": "!!"}),
        400,
    ),
    Case(
        "non-utf8 X-Secrets",
        "ors",
        post("/create", json={"task_spec": {}}, headers={**sid_headers(), "X-Secrets": NOT_UTF8}),
        400,
    ),
]

CONTROL_CASES = [
    Case("missing header", "control", control("/frozen_lake/control/reward", None), 400),
    Case("bogus id on reward", "control", control("/frozen_lake/control/reward", "bogus"), 404),
    Case("bogus id on status", "control", control("/frozen_lake/control/status", "bogus"), 404),
    Case("bogus id on info", "control", control("/control/info", "bogus"), 404),
    Case("non-utf8 id on status", "control", control("/frozen_lake/control/status", NOT_UTF8), 404),
    Case("non-utf8 id on initial_state", "control", control("/frozen_lake/control/initial_state", NOT_UTF8), 400),
    Case("10 KB id on initial_state", "control", control("/frozen_lake/control/initial_state", LONG_ID), 400),
    Case("10 KB id on reward", "control", control("/frozen_lake/control/reward", LONG_ID), 404),
    Case("unknown environment", "control", control("/nope/control/reward", "bogus"), 404),
    Case(
        "malformed json on reset", "control", control("/control/reset_session", "bogus", "POST", content=b"{seed"), 400
    ),
    Case(
        "string seed on reset", "control", control("/control/reset_session", "bogus", "POST", json={"seed": "42"}), 400
    ),
    Case("array body on reset", "control", control("/control/reset_session", "bogus", "POST", json=[42]), 400),
    Case(
        "non-utf8 body on reset", "control", control("/control/reset_session", "bogus", "POST", content=NOT_UTF8), 400
    ),
    Case(
        "20 MiB body on reset", "control", control("/control/reset_session", "bogus", "POST", content=b"1" * HUGE), 413
    ),
    Case(
        "20 MiB chunked body on reset",
        "control",
        control("/control/reset_session", "bogus", "POST", content=chunked(HUGE)),
        413,
    ),
]

MCP_CASES = [
    Case("not json", "mcp", mcp_post(content=b"garbage{")),
    Case("non-utf8 body", "mcp", mcp_post(content=NOT_UTF8)),
    Case("json array of numbers", "mcp", mcp_post([1, 2, 3])),
    Case("json scalar", "mcp", mcp_post(42)),
    Case("no method", "mcp", mcp_post({"jsonrpc": "2.0", "id": 1})),
    Case("wrong jsonrpc version", "mcp", mcp_post({"jsonrpc": "1.0", "id": 1, "method": "initialize"})),
    Case(
        "initialize with string params",
        "mcp",
        mcp_post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": "x"}),
    ),
    Case(
        "string seed in _extra", "mcp", mcp_post(initialize_body({"session_id": uuid.uuid4().hex, "seed": "42"})), 400
    ),
    Case(
        "string config in _extra",
        "mcp",
        mcp_post(initialize_body({"session_id": uuid.uuid4().hex, "config": "x"})),
        400,
    ),
    Case("10 KB session id in _extra", "mcp", mcp_post(initialize_body({"session_id": LONG_ID})), 400),
    Case("non-utf8 X-Session-ID on initialize", "mcp", mcp_post(initialize_body(), **{"x-session-id": NOT_UTF8}), 400),
    Case(
        "tools/call without a transport",
        "mcp",
        mcp_post({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "lake_move"}}),
    ),
    Case(
        "unknown transport id",
        "mcp",
        mcp_post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, **{"mcp-session-id": "bogus"}),
        404,
    ),
    Case(
        "non-utf8 transport id",
        "mcp",
        mcp_post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, **{"mcp-session-id": NOT_UTF8}),
    ),
    Case(
        "delete of an unknown transport",
        "mcp",
        lambda c: c.delete("/mcp/", headers={**ACCEPT_MCP, "mcp-session-id": "bogus"}),
        404,
    ),
    Case(
        "wrong accept header", "mcp", lambda c: c.post("/mcp/", json=initialize_body(), headers={"accept": "text/html"})
    ),
    Case("unknown environment", "mcp", mcp_post(initialize_body(), path="/nope/mcp/"), 404),
    Case("20 MiB body", "mcp", mcp_post(content=b" " * HUGE), 413),
    Case("20 MiB chunked body", "mcp", lambda c: c.post("/mcp/", content=chunked(HUGE, b" "), headers=ACCEPT_MCP), 413),
    Case("garbage in a session", "mcp", in_mcp_session({"jsonrpc": "2.0", "id": 7, "method": 12}), in_session=True),
    Case(
        "tools/call with string arguments",
        "mcp",
        in_mcp_session(
            {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "lake_move", "arguments": "UP"}}
        ),
        in_session=True,
    ),
]


@pytest.mark.parametrize("case", ORS_CASES + CONTROL_CASES + MCP_CASES, ids=lambda c: f"{c.face}: {c.id}")
def test_bad_input_gets_a_4xx_in_the_face_shape_and_the_server_stays_healthy(client: httpx.Client, case: Case):
    response = case.send(client)
    assert_face_error(response, case.face, case.in_session)
    if case.status is not None:
        expected = case.status if isinstance(case.status, tuple) else (case.status,)
        assert response.status_code in expected, (response.status_code, response.text[:500])
    ors_episode(client)
    mcp_episode(client)


def test_json_rpc_garbage_inside_a_session_is_a_json_rpc_error_not_a_transport_failure(client: httpx.Client):
    transport = mcp_open(client, "/frozen_lake/mcp/", {"session_id": uuid.uuid4().hex})
    headers = {**ACCEPT_MCP, "mcp-session-id": transport}
    unknown = client.post("/frozen_lake/mcp/", json={"jsonrpc": "2.0", "id": 3, "method": "no/such"}, headers=headers)
    assert unknown.status_code < 500
    assert unknown.json()["error"]["code"] == -32601
    # The transport survived: a real call still works on it.
    assert not mcp_call(client, "/frozen_lake/mcp/", transport, "lake_move", {"action": "DOWN"})["isError"]
    client.delete("/frozen_lake/mcp/", headers=headers)


def test_unknown_tool_and_bad_tool_input_are_typed_results_on_ors_and_is_error_on_mcp(client: httpx.Client):
    session = sid()
    assert (
        client.post(
            "/create", json={"env_name": "math", "split": "train", "index": 0}, headers=sid_headers(session)
        ).status_code
        == 200
    )
    unknown = ors_result(ors_call(client, session, "fly", {}, "math"))
    invalid = ors_result(ors_call(client, session, "submit", {"answer": ["not", "a", "string"]}, "math"))
    assert (unknown["ok"], unknown["reason"]) == (False, "not_found")
    assert (invalid["ok"], invalid["reason"]) == (False, "input_validation")
    client.post("/delete", headers=sid_headers(session))

    transport = mcp_open(client, "/frozen_lake/mcp/", {"session_id": uuid.uuid4().hex})
    assert mcp_call(client, "/frozen_lake/mcp/", transport, "fly", {})["isError"]
    assert mcp_call(client, "/frozen_lake/mcp/", transport, "lake_move", {"action": "SIDEWAYS"})["isError"]
    assert mcp_call(client, "/frozen_lake/mcp/", transport, "lake_move", {"action": 3})["isError"]
    client.delete("/frozen_lake/mcp/", headers={**ACCEPT_MCP, "mcp-session-id": transport})
    ors_episode(client)


def test_a_session_addressed_through_another_environments_path_is_refused_on_every_face(client: httpx.Client):
    session = sid()
    headers = sid_headers(session)
    assert (
        client.post("/create", json={"env_name": "math", "split": "train", "index": 0}, headers=headers).status_code
        == 200
    )
    for response in (
        client.get("/frozen_lake/prompt", headers=headers),
        client.get("/frozen_lake/task_tools", headers=headers),
        client.post("/frozen_lake/call", json={"name": "lake_move", "input": {"action": "UP"}}, headers=headers),
    ):
        assert_face_error(response, "ors")
    for path in ("/frozen_lake/control/reward", "/frozen_lake/control/status", "/frozen_lake/control/info"):
        assert_face_error(client.get(path, headers={"mcp-session-id": session}), "control")
    bound = client.post("/frozen_lake/mcp/", json=initialize_body({"session_id": session}), headers=ACCEPT_MCP)
    assert_face_error(bound, "mcp")

    # A transport opened on one environment cannot be driven through another's MCP path.
    transport = mcp_open(client, "/frozen_lake/mcp/", {"session_id": uuid.uuid4().hex})
    crossed = client.post(
        "/math/mcp/",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**ACCEPT_MCP, "mcp-session-id": transport},
    )
    assert_face_error(crossed, "mcp")
    client.delete("/frozen_lake/mcp/", headers={**ACCEPT_MCP, "mcp-session-id": transport})

    # The math session itself was not harmed.
    assert client.get("/math/prompt", headers=headers).status_code == 200
    assert ors_result(ors_call(client, session, "submit", {"answer": "2.25"}, "math"))["output"]["reward"] == 1.0
    client.post("/delete", headers=headers)
    for response in (client.get("/math/prompt", headers=headers), client.post("/ping", headers=headers)):
        assert response.status_code == 410 and "detail" in response.json()


DEEP = b"[" * 5000 + b"]" * 5000
"""JSON nested deeper than Python's recursion limit: `json.loads` raises RecursionError, not a ValueError."""

DEEP_CASES = [
    Case("deeply nested json on tasks", "ors", post("/math/tasks", content=DEEP), 422),
    Case("deeply nested json on create", "ors", post("/create", content=DEEP, headers=sid_headers()), 422),
    Case(
        "deeply nested tool input",
        "ors",
        post("/math/call", content=b'{"name": "submit", "input": {"answer": ' + DEEP + b"}}", headers=sid_headers()),
        422,
    ),
    Case(
        "deeply nested json on reset", "control", control("/control/reset_session", "bogus", "POST", content=DEEP), 400
    ),
    Case("deeply nested json-rpc", "mcp", mcp_post(content=DEEP)),
]


@pytest.mark.parametrize("case", DEEP_CASES, ids=lambda c: f"{c.face}: {c.id}")
def test_deeply_nested_json_gets_a_4xx_in_the_face_shape(base: str, case: Case):
    # A fresh client: after a 500 the server closes the connection.
    with httpx.Client(base_url=base, timeout=15) as client:
        response = case.send(client)
    assert_face_error(response, case.face)


LONE = b'"\\ud800"'
"""A JSON string holding a lone surrogate escape: valid JSON syntax, but no Unicode text (it cannot be encoded)."""


def in_math_session(path: str, content: bytes) -> Callable[[httpx.Client], httpx.Response]:
    def send(client: httpx.Client) -> httpx.Response:
        session = client.post("/create_session").json()["sid"]
        created = client.post(
            "/create", json={"env_name": "math", "split": "train", "index": 1}, headers=sid_headers(session)
        )
        assert created.status_code == 200
        try:
            return client.post(path, content=content, headers=sid_headers(session))
        finally:
            client.post("/delete", headers=sid_headers(session))

    return send


def secrets_header(value: bytes) -> dict[str, str]:
    return {"X-Secrets": base64.b64encode(b'{"KEY": {"value": ' + value + b"}}").decode(), **sid_headers()}


SURROGATE_CASES = [
    Case(
        "lone surrogate tool name", "ors", in_math_session("/math/call", b'{"name": ' + LONE + b', "input": {}}'), 422
    ),
    Case(
        "lone surrogate tool input",
        "ors",
        in_math_session("/math/call", b'{"name": "submit", "input": {"answer": ' + LONE + b"}}"),
        422,
    ),
    Case(
        "lone surrogate env_name",
        "ors",
        post("/create", content=b'{"env_name": ' + LONE + b"}", headers=sid_headers()),
        422,
    ),
    Case(
        "lone surrogate in a task spec",
        "ors",
        post(
            "/create",
            content=b'{"env_name": "math", "task_spec": {"question": ' + LONE + b', "answer": "1"}}',
            headers=sid_headers(),
        ),
        422,
    ),
    Case(
        "lone surrogate in a secret",
        "ors",
        post("/create", json={"env_name": "math", "split": "train", "index": 1}, headers=secrets_header(LONE)),
        400,
    ),
    Case(
        "lone surrogate on reset",
        "control",
        control("/control/reset_session", "bogus", "POST", content=b'{"seed": 1, "x": ' + LONE + b"}"),
        400,
    ),
    Case(
        "lone surrogate json-rpc method",
        "mcp",
        mcp_post(content=b'{"jsonrpc": "2.0", "id": 1, "method": ' + LONE + b"}"),
    ),
    Case(
        "lone surrogate in _extra",
        "mcp",
        mcp_post(content=json.dumps(initialize_body({"session_id": "LONE"})).encode().replace(b'"LONE"', LONE)),
    ),
]


@pytest.mark.parametrize("case", SURROGATE_CASES, ids=lambda c: f"{c.face}: {c.id}")
def test_a_lone_surrogate_anywhere_in_json_is_malformed_input_in_the_face_shape(client: httpx.Client, case: Case):
    response = case.send(client)
    assert_face_error(response, case.face)
    expected = case.status if isinstance(case.status, tuple) else (case.status,)
    assert case.status is None or response.status_code in expected, (response.status_code, response.text[:500])
    ors_episode(client)
