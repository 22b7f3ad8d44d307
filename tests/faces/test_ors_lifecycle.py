"""ORS session endings over real HTTP: /delete, /delete_session, the reaper and server shutdown each tear a
session down exactly once (checklist 27-30, 34's "no live sessions left")."""

from __future__ import annotations

import threading
import time

import httpx

from tests.ors_envs import (
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
)
from tests.waiting import wait_until

# /delete and /delete_session


def test_delete_answers_the_sid_and_tears_down_exactly_once(live: Live) -> None:
    tag = new_tag()
    sid = create(live.client, math_task(0, tag))
    assert live.client.get("/prompt", headers=sid_header(sid)).status_code == 200
    response = live.client.post("/delete", headers=sid_header(sid))
    assert response.status_code == 200
    assert response.json() == {"sid": sid}
    assert count(tag, "teardown") == 1
    assert sid not in live.store


def test_delete_is_idempotent_and_never_tears_down_twice(client: httpx.Client) -> None:
    tag = new_tag()
    sid = create(client, math_task(0, tag))
    assert client.get("/prompt", headers=sid_header(sid)).status_code == 200
    for _ in range(3):
        response = client.post("/delete", headers=sid_header(sid))
        assert response.status_code == 200
        assert response.json() == {"sid": sid}
    assert count(tag, "teardown") == 1


def test_delete_of_an_unknown_session_answers_200_with_the_sid(client: httpx.Client) -> None:
    response = client.post("/delete", headers=sid_header("never-created-either"))
    assert response.status_code == 200
    assert response.json() == {"sid": "never-created-either"}


def test_delete_session_answers_the_sid(client: httpx.Client) -> None:
    sid = client.post("/create_session").json()["sid"]
    response = client.post("/delete_session", headers=sid_header(sid))
    assert response.status_code == 200
    assert response.json() == {"sid": sid}


def test_the_sdk_ending_delete_then_delete_session_tears_down_once(live: Live) -> None:
    tag = new_tag()
    sid = live.client.post("/create_session").json()["sid"]
    create(live.client, math_task(0, tag), sid=sid)
    call_result(call(live.client, sid, "submit", {"answer": "4"}))
    assert live.client.post("/delete", headers=sid_header(sid)).json() == {"sid": sid}
    assert live.client.post("/delete_session", headers=sid_header(sid)).json() == {"sid": sid}
    assert count(tag, "teardown") == 1
    assert sid not in live.store


def test_delete_session_alone_on_a_live_session_ends_it_at_most_once(live: Live) -> None:
    tag = new_tag()
    sid = create(live.client, math_task(0, tag))
    assert live.client.post("/delete_session", headers=sid_header(sid)).json() == {"sid": sid}
    live.client.post("/delete", headers=sid_header(sid))
    # A session deleted before its setup ended is torn down by the setup task, just after.
    wait_until(lambda: count(tag, "teardown") == 1, what="teardown")
    assert count(tag, "teardown") == 1


def test_deleting_a_session_with_failed_setup_tears_it_down_once(client: httpx.Client) -> None:
    tag = new_tag()
    sid = create(client, {"tag": tag}, env_name="failingsetup")
    assert client.get("/prompt", headers=sid_header(sid)).status_code == 500
    assert client.post("/delete", headers=sid_header(sid)).json() == {"sid": sid}
    assert count(tag, "teardown") == 1


def test_a_session_deleted_right_after_create_tears_down_every_environment_it_built(client: httpx.Client) -> None:
    tags = [new_tag() for _ in range(50)]
    for tag in tags:
        sid = create(client, math_task(0, tag))
        assert client.post("/delete", headers=sid_header(sid)).json() == {"sid": sid}
    settled = time.monotonic() + 3
    while time.monotonic() < settled:
        built = [count(tag, "init") for tag in tags]
        torn_down = [count(tag, "teardown") for tag in tags]
        if built == torn_down:
            break
        time.sleep(0.05)
    leaked = [journal(tag) for tag in tags if count(tag, "init") != count(tag, "teardown")]
    assert not leaked, f"{len(leaked)} of 50 environments were built but never torn down: {leaked[:3]}"
    assert all(count(tag, "teardown") <= 1 for tag in tags)


def test_deleting_a_session_whose_setup_still_runs_answers_at_once_and_tears_down_after_setup_ends(
    client: httpx.Client,
) -> None:
    tag = new_tag()
    try:
        sid = create(client, {"tag": tag}, env_name="slowsetup")
        wait_until(lambda: "setup" in journal(tag), what="setup to start")
        started = time.monotonic()
        assert client.post("/delete", headers=sid_header(sid)).json() == {"sid": sid}
        assert time.monotonic() - started < 3
        assert client.post("/ping", headers=sid_header(sid)).status_code == 410
    finally:
        gate(tag).set()
    wait_until(lambda: "setup-done" in journal(tag) and "teardown" in journal(tag), what="setup end and teardown")
    assert journal(tag) == ["init", "setup", "setup-done", "teardown"]


def test_deleting_a_session_during_a_call_ends_the_stream_and_tears_down_once(live: Live) -> None:
    tag = new_tag()
    sid = create(live.client, math_task(0, tag))
    try:
        with httpx.Client(base_url=live.url, timeout=10) as other:
            headers = {**sid_header(sid), "Accept": "text/event-stream"}
            with other.stream("POST", "/mathlike/call", json={"name": "wait", "input": {}}, headers=headers) as stream:
                pieces = stream.iter_raw()
                assert next(pieces).startswith(b"event: task_id")
                wait_until(lambda: "wait-start" in journal(tag), what="the tool to start")
                assert live.client.post("/delete", headers=sid_header(sid)).json() == {"sid": sid}
                gate(tag).set()
                rest = b"".join(pieces)
            assert b"event: end" in rest or b"event: error" in rest, rest
    finally:
        gate(tag).set()
    wait_until(lambda: count(tag, "teardown") == 1, what="teardown")
    assert count(tag, "teardown") == 1


def test_a_thousand_sessions_created_and_deleted_leave_the_store_empty(live: Live) -> None:
    before = len(live.store)
    for i in range(1000):
        sid = f"churn-{i}"
        response = live.client.post("/create", json={"task_spec": math_task(i % 5)}, headers=sid_header(sid))
        assert response.status_code == 200, response.text
        assert live.client.post("/delete", headers=sid_header(sid)).json() == {"sid": sid}
    assert len(live.store) == before
    assert live.client.post("/ping", headers=sid_header("churn-0")).status_code == 410


# The reaper


def test_the_reaper_tears_down_an_idle_session_while_refreshed_ones_survive() -> None:
    idle_tag, kept_tag = new_tag(), new_tag()
    refreshers = [
        ("POST", "/ping", None),
        ("GET", "/mathlike/prompt", None),
        ("GET", "/mathlike/task_tools", None),
        ("POST", "/mathlike/call", {"name": "noargs", "input": {}}),
    ]
    with live_server(session_timeout=0.6) as live:
        idle = create(live.client, math_task(0, idle_tag))
        kept = [create(live.client, math_task(0, kept_tag)) for _ in refreshers]
        deadline = time.monotonic() + 6
        while count(idle_tag, "teardown") == 0:
            assert time.monotonic() < deadline, "the idle session was never reaped"
            for sid, (method, path, body) in zip(kept, refreshers, strict=True):
                response = live.client.request(
                    method, path, json=body, headers={**sid_header(sid), "Accept": "text/event-stream"}
                )
                assert response.status_code == 200, (path, response.text)
            time.sleep(0.1)
        assert idle not in live.store
        assert count(idle_tag, "teardown") == 1
        assert count(kept_tag, "teardown") == 0
        for sid in kept:
            assert live.client.post("/ping", headers=sid_header(sid)).json() == {"status": "ok"}
        response = live.client.get("/prompt", headers=sid_header(idle))
        assert response.status_code == 410
        timeout = live.app.state.settings.session_timeout
        assert response.json() == {"detail": f"Session expired after {timeout:g} s of inactivity (--session-timeout)"}
    assert count(kept_tag, "teardown") == len(refreshers)
    assert count(idle_tag, "teardown") == 1


def test_the_reaper_spares_a_session_whose_call_outlasts_the_timeout() -> None:
    tag = new_tag()
    with live_server(session_timeout=0.4) as live:
        sid = create(live.client, math_task(0, tag))
        try:
            headers = {**sid_header(sid), "Accept": "text/event-stream"}
            with live.client.stream("POST", "/mathlike/call", json={"name": "wait", "input": {}}, headers=headers) as s:
                pieces = s.iter_raw()
                next(pieces)
                reaped_before = live.store.counts["reaped"]
                started = time.monotonic()
                # Time is the subject here: outlast the timeout several reaper rounds over.
                while time.monotonic() - started < 1.0:
                    next(pieces)
                assert sid in live.store
                assert live.store.counts["reaped"] == reaped_before
                gate(tag).set()
                raw = b"".join(pieces)
            assert b'"text":"waited"' in raw
        finally:
            gate(tag).set()


# Shutdown


def test_server_shutdown_tears_down_every_live_session_exactly_once() -> None:
    tags = [new_tag() for _ in range(5)]
    deleted = new_tag()
    with live_server() as live:
        for tag in tags:
            create(live.client, math_task(0, tag))
        sid = create(live.client, math_task(0, deleted))
        assert live.client.get("/prompt", headers=sid_header(sid)).status_code == 200
        live.client.post("/delete", headers=sid_header(sid))
        assert [count(tag, "teardown") for tag in tags] == [0] * 5
        store = live.store
    assert len(store) == 0
    assert [count(tag, "teardown") for tag in tags] == [1] * 5
    assert count(deleted, "teardown") == 1


def test_server_shutdown_lets_a_running_call_finish_before_teardown() -> None:
    tag = new_tag()
    answers: list[bytes] = []
    with live_server(shutdown_grace=5.0) as live:
        sid = create(live.client, math_task(0, tag))

        def sleep_call() -> None:
            with httpx.Client(base_url=live.url, timeout=10) as other:
                answers.append(post_sse(other, "/mathlike/call", {"name": "sleep", "input": {"seconds": 0.5}}, sid)[1])

        caller = threading.Thread(target=sleep_call)
        caller.start()
        wait_until(lambda: "sleep-start" in journal(tag), what="the call to start")
    caller.join(timeout=10)
    assert journal(tag)[-3:] == ["sleep-start", "sleep-end", "teardown"]
    assert len(answers) == 1


def test_server_shutdown_with_a_setup_still_running_does_not_hang() -> None:
    tag = new_tag()
    started = time.monotonic()
    try:
        with live_server() as live:
            create(live.client, {"tag": tag}, env_name="slowsetup")
            wait_until(lambda: "setup" in journal(tag), what="setup to start")
    finally:
        gate(tag).set()
    assert time.monotonic() - started < 8
    assert count(tag, "teardown") <= 1
