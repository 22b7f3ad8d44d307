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

    assert result["ping_after_idle"] in (404, 410)
    assert "call" not in result
    # The client maps only a 410 to SessionTerminatedError; a 404 surfaces as its generic response error.
    error = result["error"]
    assert error["type"] == "SessionTerminatedError" or (error["type"], error["status"]) == (
        "SessionResponseError",
        404,
    )


def test_openreward_client_given_the_servers_api_key_plays_unchanged(openreward_python, start_server, run_client):
    server = start_server("--api-key", "s3cret-key")
    key = {"ORS_TEST_API_KEY": "s3cret-key"}
    result = run_client(openreward_python, "openreward_episode.py", server.url, "math", "math", server=server, env=key)

    assert_math_episodes(result)
