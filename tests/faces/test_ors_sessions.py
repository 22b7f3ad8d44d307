"""ORS sessions over real HTTP: /create_session, /create, /ping, /prompt, /task_tools and setup readiness
(checklist 9-18, 30-32 and the wrong-environment addendum)."""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid

import httpx
import pytest

from tests.ors_envs import (
    MATH_TASKS,
    PNG_1X1,
    Live,
    call,
    call_result,
    count,
    create,
    gate,
    journal,
    live_server,
    math_task,
    new_tag,
    post_sse,
    sid_header,
    x_secrets,
)

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


# /create_session


@pytest.mark.parametrize("body", [None, {}, {"env": {"name": "mathlike", "anything": [1, 2]}}])
def test_create_session_with_accept_event_stream_sends_exactly_task_id_then_empty_end(
    client: httpx.Client, body: object
) -> None:
    response, raw = post_sse(client, "/create_session", body, sid=None)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert re.fullmatch(rf"event: task_id\r\ndata: {UUID}\r\n\r\nevent: end\r\ndata: \r\n\r\n", raw.decode()), raw


def test_create_session_ignores_the_secrets_and_key_headers_the_sdk_sends(client: httpx.Client) -> None:
    headers = {"X-Secrets": x_secrets({"api_key": "k"}), "X-API-Key": "k", "X-Deployment": "d"}
    response, raw = post_sse(client, "/create_session", {}, sid=None, headers=headers)
    assert response.status_code == 200
    assert raw.startswith(b"event: task_id\r\n")


def test_create_session_gives_a_fresh_id_each_time(client: httpx.Client) -> None:
    ids = {post_sse(client, "/create_session", {}, sid=None)[1].split(b"\r\n")[1] for _ in range(5)}
    assert len(ids) == 5


@pytest.mark.parametrize("accept", [None, "application/json", "*/*"])
def test_create_session_without_accept_event_stream_answers_json_sid(client: httpx.Client, accept: str | None) -> None:
    headers = {"Accept": accept} if accept else {}
    response = client.post("/create_session", json={}, headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert set(response.json()) == {"sid"}
    assert re.fullmatch(UUID, response.json()["sid"])


def test_create_session_honours_event_stream_among_several_accepted_types(client: httpx.Client) -> None:
    response = client.post("/create_session", headers={"Accept": "application/json, text/event-stream;q=0.9"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")


def test_an_id_from_create_session_can_be_created_and_used(client: httpx.Client) -> None:
    sid = client.post("/create_session", json={}).json()["sid"]
    create(client, math_task(1), sid=sid)
    assert client.get("/mathlike/prompt", headers=sid_header(sid)).json()[0]["text"] == "What is 3*3?"


# /create


def test_create_with_env_name_and_task_spec_answers_the_sid_and_runs_setup(client: httpx.Client) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag), env_name="mathlike")
    prompt = client.get("/mathlike/prompt", headers=sid_header(sid))
    assert prompt.status_code == 200
    assert journal(tag)[:2] == ["init", "setup"]


def test_create_advertises_the_idle_timeout_and_accepts_episode_labels() -> None:
    # Clients ping within this many idle seconds (ors-client at a third); labels are accepted, not yet stored.
    with live_server(session_timeout=42.5) as live:
        response = live.client.post(
            "/create",
            json={"task_spec": math_task()},
            headers={"X-Session-ID": f"test-{uuid.uuid4().hex}", "X-Episode-Labels": "run=r1,policy=a%3Db"},
        )
    assert response.status_code == 200, response.text
    assert response.headers["X-Session-Timeout"] == "42.5"


def test_create_matches_env_name_case_insensitively(client: httpx.Client) -> None:
    sid = create(client, {"start": 0}, env_name="OtherEnv")
    assert client.get("/otherenv/prompt", headers=sid_header(sid)).status_code == 200


def test_create_without_env_name_uses_the_default_environment(client: httpx.Client) -> None:
    sid = create(client, math_task(3))
    assert client.get("/mathlike/prompt", headers=sid_header(sid)).json()[0]["text"] == "What is 9-1?"


def test_create_without_env_name_logs_which_environment_it_got_at_debug(
    client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="ors_server"):
        sid = create(client, math_task(3))
        create(client, math_task(3), env_name="mathlike")
    [record] = [r for r in caplog.records if "env_name" in r.getMessage()]
    assert record.levelno == logging.DEBUG
    assert record.getMessage() == (
        f"session {sid}: /create names no env_name (an openreward client without a variant): "
        "serving the default environment 'mathlike' (the server's first)"
    )


@pytest.mark.parametrize(("split", "index"), [("train", 2), ("test", 0)])
def test_create_with_split_and_index_resolves_the_task(client: httpx.Client, split: str, index: int) -> None:
    sid = create(client, env_name="mathlike", split=split, index=index)
    prompt = client.get("/mathlike/prompt", headers=sid_header(sid)).json()
    assert prompt[0]["text"] == MATH_TASKS[split][index]["question"]


def test_create_with_split_and_index_works_for_lazy_environments(client: httpx.Client) -> None:
    sid = create(client, env_name="otherenv", split="train", index=1)
    result = call_result(call(client, sid, "increment", path="/otherenv/call"))
    assert result["output"]["blocks"][0]["text"] == "2"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"env_name": "mathlike", "split": "nosuch", "index": 0}, "Invalid split"),
        ({"env_name": "mathlike", "split": "train", "index": 99}, "Invalid index"),
        ({"env_name": "mathlike", "split": "train", "index": -1}, "Invalid index"),
    ],
)
def test_create_with_a_bad_split_or_index_answers_400(client: httpx.Client, body: dict, detail: str) -> None:
    sid = f"bad-{uuid.uuid4().hex}"
    response = client.post("/create", json=body, headers=sid_header(sid))
    assert response.status_code == 400
    assert response.json() == {"detail": detail}
    assert client.post("/ping", headers=sid_header(sid)).status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"env_name": "mathlike"},
        {"env_name": "mathlike", "split": "train"},
        {"env_name": "mathlike", "index": 0},
        {"env_name": "mathlike", "task_spec": math_task(), "split": "train", "index": 0},
        {"env_name": "mathlike", "task_spec": "not an object"},
    ],
)
def test_create_with_neither_or_both_task_forms_answers_422_with_a_list(client: httpx.Client, body: dict) -> None:
    response = client.post("/create", json=body, headers=sid_header(f"bad-{uuid.uuid4().hex}"))
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail
    assert all({"type", "loc", "msg"} <= set(error) for error in detail), detail


def test_create_for_an_unknown_environment_answers_404(client: httpx.Client) -> None:
    response = client.post("/create", json={"env_name": "nosuch", "task_spec": {}}, headers=sid_header("x-unknown"))
    assert response.status_code == 404
    assert response.json() == {"detail": "unknown environment 'nosuch'"}


def test_creating_the_same_sid_twice_answers_400_session_already_exists(client: httpx.Client) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    response = client.post("/create", json={"task_spec": math_task(1)}, headers=sid_header(sid))
    assert response.status_code == 400
    assert response.json() == {"detail": "Session already exists"}
    assert client.get("/mathlike/prompt", headers=sid_header(sid)).json()[0]["text"] == "What is 2+2?"
    assert count(tag, "init") == 1


def test_create_tolerates_toolset_name(client: httpx.Client) -> None:
    create(client, math_task(), env_name="mathlike", toolset_name=None)


def test_create_accepts_any_well_formed_id_not_issued_by_create_session(client: httpx.Client) -> None:
    sid = f"my.own:session_id-{uuid.uuid4().hex[:8]}"
    create(client, math_task(), sid=sid)
    assert client.post("/ping", headers=sid_header(sid)).json() == {"status": "ok"}


# /ping, /prompt, /task_tools


def test_ping_answers_ok_for_a_live_session_with_an_empty_octet_stream_body(client: httpx.Client) -> None:
    sid = create(client, math_task())
    response = client.post(
        "/ping", content=b"", headers={**sid_header(sid), "Content-Type": "application/octet-stream"}
    )
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_ping_for_an_unknown_session_answers_404(client: httpx.Client) -> None:
    response = client.post("/ping", headers=sid_header("never-created"))
    assert response.status_code == 404
    assert response.json() == {"detail": "Active environment not found"}


def test_prompt_returns_text_blocks_with_type_text_and_detail(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    response = client.get("/mathlike/prompt", headers=sid_header(sid))
    assert response.status_code == 200
    assert response.json() == [{"type": "text", "text": "What is 2+2?", "detail": None}]


def test_prompt_returns_image_blocks_with_data_mime_type_and_detail(client: httpx.Client) -> None:
    sid = create(client, {"start": 0}, env_name="otherenv")
    blocks = client.get("/otherenv/prompt", headers=sid_header(sid)).json()
    assert blocks == [
        {"type": "text", "text": "Count up.", "detail": None},
        {"type": "image", "data": PNG_1X1, "mimeType": "image/png", "detail": None},
    ]


def test_task_tools_has_the_shape_and_tools_of_tools(client: httpx.Client) -> None:
    sid = create(client, math_task())
    response = client.get("/mathlike/task_tools", headers=sid_header(sid))
    assert response.status_code == 200
    tools = response.json()["tools"]
    assert all(set(t) == {"name", "description", "input_schema"} for t in tools)
    assert tools == client.get("/mathlike/tools").json()["tools"]


# Bare paths and the path's environment


def test_bare_session_paths_answer_for_the_sessions_own_environment(client: httpx.Client) -> None:
    sid = create(client, {"start": 5}, env_name="otherenv")
    prompt = client.get("/prompt", headers=sid_header(sid))
    assert prompt.status_code == 200
    assert prompt.json()[0]["text"] == "Count up."
    task_tools = client.get("/task_tools", headers=sid_header(sid))
    assert [t["name"] for t in task_tools.json()["tools"]] == ["increment"]
    result = call_result(call(client, sid, "increment", path="/call"))
    assert result["output"]["blocks"][0]["text"] == "6"


def test_bare_call_path_serves_the_default_environment_without_redirect(client: httpx.Client) -> None:
    sid = create(client, math_task(0))
    response, raw = post_sse(client, "/call", {"name": "submit", "input": {"answer": "4"}}, sid)
    assert response.status_code == 200
    assert b'"reward":1.0' in raw


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/otherenv/prompt", None),
        ("GET", "/otherenv/task_tools", None),
        ("POST", "/otherenv/call", {"name": "increment", "input": {}}),
        ("POST", "/otherenv/call", {"name": "submit", "input": {"answer": "4"}}),
    ],
)
def test_a_session_addressed_through_another_environments_path_answers_400(
    client: httpx.Client, method: str, path: str, body: object
) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    response = client.request(method, path, json=body, headers={**sid_header(sid), "Accept": "text/event-stream"})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/json")
    assert isinstance(response.json()["detail"], str)
    assert count(tag, "submit") == 0
    assert client.post("/ping", headers=sid_header(sid)).status_code == 200


# Setup readiness


def test_create_returns_while_setup_still_runs_and_ping_answers_meanwhile(client: httpx.Client) -> None:
    tag = new_tag()
    try:
        sid = create(client, {"tag": tag}, env_name="slowsetup")
        assert "setup-done" not in journal(tag)
        assert client.post("/ping", headers=sid_header(sid)).json() == {"status": "ok"}
    finally:
        gate(tag).set()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("GET", "/slowsetup/prompt", None), ("POST", "/slowsetup/call", {"name": "noop", "input": {}})],
)
def test_ready_endpoints_answer_503_starting_with_retry_after_while_setup_is_slow(
    client: httpx.Client, method: str, path: str, body: object
) -> None:
    tag = new_tag()
    try:
        sid = create(client, {"tag": tag}, env_name="slowsetup")
        started = time.monotonic()
        response = client.request(method, path, json=body, headers={**sid_header(sid), "Accept": "text/event-stream"})
        assert response.status_code == 503
        assert time.monotonic() - started < 5
        assert response.json() == {"detail": "Environment still starting."}
        assert response.headers["x-backend-state"] == "starting"
        assert int(response.headers["retry-after"]) >= 1
        assert count(tag, "noop") == 0
        gate(tag).set()
        deadline = time.monotonic() + 5
        while (response := client.get("/slowsetup/prompt", headers=sid_header(sid))).status_code == 503:
            assert time.monotonic() < deadline, "setup never finished"
        assert response.status_code == 200
        assert response.json()[0]["text"] == "ready now"
    finally:
        gate(tag).set()


def test_a_request_waiting_for_setup_gets_410_when_the_session_is_deleted() -> None:
    tag = new_tag()
    with live_server(ready_wait=5.0) as live:
        try:
            sid = create(live.client, {"tag": tag}, env_name="slowsetup")
            answers: list[httpx.Response] = []

            def wait_for_prompt() -> None:
                with httpx.Client(base_url=live.url, timeout=10) as other:
                    answers.append(other.get("/slowsetup/prompt", headers=sid_header(sid)))

            waiter = threading.Thread(target=wait_for_prompt)
            waiter.start()
            session = live.store.sessions()[0]
            deadline = time.monotonic() + 5
            while session.ready.statistics().tasks_waiting == 0:
                assert time.monotonic() < deadline, "the prompt request never waited for setup"
                time.sleep(0.01)
            assert live.client.post("/delete", headers=sid_header(sid)).status_code == 200
            waiter.join(timeout=10)
            assert len(answers) == 1
            assert answers[0].status_code == 410
            assert answers[0].json() == {"detail": "Session deleted"}
        finally:
            gate(tag).set()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/failingsetup/prompt", None),
        ("GET", "/prompt", None),
        ("POST", "/failingsetup/call", {"name": "noop", "input": {}}),
    ],
)
def test_a_failed_setup_answers_500_with_the_error_while_ping_stays_ok(
    client: httpx.Client, method: str, path: str, body: object
) -> None:
    tag = new_tag()
    sid = create(client, {"tag": tag}, env_name="failingsetup")
    response = client.request(method, path, json=body, headers={**sid_header(sid), "Accept": "text/event-stream"})
    assert response.status_code == 500
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {"detail": "ValueError: setup exploded"}
    assert count(tag, "noop") == 0
    assert client.post("/ping", headers=sid_header(sid)).json() == {"status": "ok"}
    assert client.post("/delete", headers=sid_header(sid)).json() == {"sid": sid}


# Idle refresh


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/ping", None),
        ("GET", "/mathlike/prompt", None),
        ("GET", "/mathlike/task_tools", None),
        ("POST", "/mathlike/call", {"name": "noargs", "input": {}}),
        ("GET", "/prompt", None),
    ],
)
def test_session_bearing_requests_refresh_the_idle_timer(live: Live, method: str, path: str, body: object) -> None:
    sid = create(live.client, math_task())
    session = next(s for s in live.store.sessions() if s.id == sid)
    session.last_active -= 1000
    stale = session.last_active
    response = live.client.request(method, path, json=body, headers={**sid_header(sid), "Accept": "text/event-stream"})
    assert response.status_code == 200
    assert session.last_active > stale + 999
