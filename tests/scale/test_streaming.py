"""SSE through the front is a stream: events reach the client as the worker sends them, not at the end."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from tests.scale.deployment import deployment


def test_an_sse_call_streams_its_task_id_and_progress_through_the_front_before_the_tool_has_answered(tmp_path):
    gate = tmp_path / "gate"
    env = {"ORS_GATE_FILE": str(gate)}
    with deployment(tmp_path, "--env", "tests.scale.scale_envs:Gated", "--log-level", "warning", env=env) as front:
        with httpx.Client(base_url=front.url, timeout=30) as client:
            sid = client.post("/create_session").json()["sid"]
            created = client.post("/create", json={"task_spec": {}}, headers={"X-Session-ID": sid})
            assert created.status_code == 200, created.text
            headers = {"X-Session-ID": sid, "Accept": "text/event-stream"}
            with client.stream("POST", "/call", json={"name": "wait", "input": {}}, headers=headers) as answer:
                assert answer.headers["content-type"].startswith("text/event-stream")
                received = b""
                chunks = answer.iter_raw()
                while b"event: progress" not in received:
                    received += next(chunks)
                # The first events are through while the tool is still waiting on the gate: its task id, and the
                # progress it reported.
                assert received.startswith(b"event: task_id") and not gate.exists()
                gate.touch()
                received += b"".join(chunks)
    # Had the front held the stream back, the tool would have timed out before the test saw its first event.
    assert b"through" in received and b"event: end" in received


def test_an_sse_call_cut_by_its_workers_death_ends_as_a_failure_not_as_a_complete_stream(tmp_path):
    env = {"ORS_GATE_FILE": str(tmp_path / "never")}  # the tool waits on a gate that never opens
    args = ("--env", "tests.scale.scale_envs:Gated", "--log-level", "warning")
    with deployment(tmp_path, *args, workers=1, env=env) as front:
        with httpx.Client(base_url=front.url, timeout=30) as client:
            sid = client.post("/create_session").json()["sid"]
            assert client.post("/create", json={"task_spec": {}}, headers={"X-Session-ID": sid}).status_code == 200
            headers = {"X-Session-ID": sid, "Accept": "text/event-stream"}
            received = b""
            with client.stream("POST", "/call", json={"name": "wait", "input": {}}, headers=headers) as answer:
                chunks = answer.iter_raw()
                while b"\r\n\r\n" not in received:
                    received += next(chunks)
                assert received.startswith(b"event: task_id")
                os.kill(front.worker_pids()[0], signal.SIGKILL)
                # The stream must not end cleanly: no `end`, no `error`, and a whole response would look complete.
                with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
                    for chunk in chunks:
                        received += chunk
    assert b"event: end" not in received
