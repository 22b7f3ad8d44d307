"""The `ors-sdk` 0.1.0 client (`ors.client.ORS`), from its own venv, against `ors-server serve`."""

from __future__ import annotations

import pytest

from tests.clients.harness import assert_math_episodes

pytestmark = pytest.mark.clients


def test_ors_sdk_client_plays_math_episodes(openreward_python, server, run_client):
    result = run_client(openreward_python, "ors_sdk_episode.py", server.url, "math", server=server)

    assert_math_episodes(result)
    # ors-sdk's ToolCallError carries the server's message and no reason.
    assert result["by_task"]["after_finish"]["error"]["message"]
    assert result["mistakes"]["unknown_tool"]["error"]["message"]


def test_ors_sdk_client_given_the_servers_api_key_plays_unchanged(openreward_python, start_server, run_client):
    server = start_server("--api-key", "s3cret-key")
    key = {"ORS_TEST_API_KEY": "s3cret-key"}
    result = run_client(openreward_python, "ors_sdk_episode.py", server.url, "math", server=server, env=key)

    assert_math_episodes(result)
