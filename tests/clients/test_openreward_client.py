"""The official `openreward` 0.1.167 client, from its own venv, against `ors-server serve` (ors-wire.md §6)."""

from __future__ import annotations

import pytest

from tests.clients.harness import assert_math_episodes

pytestmark = pytest.mark.clients


@pytest.mark.parametrize("variant", ["math", "none"], ids=["explicit-paths", "bare-paths"])
def test_openreward_client_plays_math_episodes(openreward_python, server, run_client, variant):
    result = run_client(openreward_python, "openreward_episode.py", server.url, "math", variant, server=server)

    assert_math_episodes(result)
    assert result["by_task"]["after_finish"]["error"]["reason"] == "episode_finished"
    assert result["mistakes"]["unknown_tool"]["error"]["reason"] == "not_found"
    assert result["mistakes"]["bad_input"]["error"]["reason"] == "input_validation"
    assert result["mistakes"]["missing_input"]["error"]["reason"] == "input_validation"


def test_openreward_client_pings_keep_an_idle_session_alive(openreward_python, start_server, run_client):
    # The client pings every 10 s from its own thread: 22 s without a call spans no 15 s silence.
    server = start_server("--session-timeout", "15")
    result = run_client(openreward_python, "openreward_idle.py", server.url, "math", "22", server=server)

    assert "error" not in result, result
    assert result["ping_after_idle"] == 200
    assert result["call"] == {"reward": 1.0, "finished": True}


def test_openreward_client_sees_a_reaped_session_as_terminated(openreward_python, start_server, run_client):
    server = start_server("--session-timeout", "2")
    result = run_client(openreward_python, "openreward_idle.py", server.url, "math", "6", server=server)

    assert result["ping_after_idle"] == 410
    assert "call" not in result
    # The client maps a 410 on a call to SessionTerminatedError, with the server's detail in its message.
    assert result["error"]["type"] == "SessionTerminatedError"
    assert "Session expired after 2 s of inactivity" in result["error"]["message"]
    assert f"session {result['sid']} (math) reaped: no request for" in server.log_tail(20_000)


def test_openreward_client_with_a_reaped_id_remembered_or_forgotten(openreward_python, start_server, run_client):
    """410 (remembered) ends the client's session for good; 404 (forgotten past --tombstones) is a generic
    response error that the client does not take for the session's end: it raises it again on every call."""
    server = start_server("--session-timeout", "2", "--tombstones", "1")
    result = run_client(openreward_python, "openreward_reaped.py", server.url, "math", "6", server=server)

    remembered, forgotten = result["remembered"], result["forgotten"]
    assert remembered["ping"] == 410 and forgotten["ping"] == 404
    assert remembered["call"]["type"] == remembered["call_again"]["type"] == "SessionTerminatedError"
    assert "server returned 410: Session expired after 2 s of inactivity" in remembered["call"]["message"]
    for call in (forgotten["call"], forgotten["call_again"]):
        assert (call["type"], call["status"]) == ("SessionResponseError", 404), call
        assert "Active environment not found" in call["message"]
    log = server.log_tail(20_000)
    for session in (remembered, forgotten):
        assert log.count(f"session {session['sid']} (math) reaped") == 1, log


def test_openreward_client_given_the_servers_api_key_plays_unchanged(openreward_python, start_server, run_client):
    server = start_server("--api-key", "s3cret-key")
    key = {"ORS_TEST_API_KEY": "s3cret-key"}
    result = run_client(openreward_python, "openreward_episode.py", server.url, "math", "math", server=server, env=key)

    assert_math_episodes(result)
