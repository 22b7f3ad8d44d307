"""fastmcp 4.2.3 (its own venv) in its default mode against `ors-server serve`: it discovers the 2026-07-28 era and
plays FrozenLake through an episode URL and through `X-Session-ID`; forced to 2025, through its protocol session.
Rewards come from `structuredContent`, next to the unchanged text."""

from __future__ import annotations

import json

import pytest

from tests.clients.harness import run_script

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def episodes(fastmcp_python, server, tmp_path_factory) -> dict:
    return run_script(
        fastmcp_python, "fastmcp_episode.py", server.url, home=tmp_path_factory.mktemp("fastmcp"), server=server
    )


@pytest.mark.parametrize(
    ("way", "version"),
    [("episode_url", "2026-07-28"), ("x_session_id", "2026-07-28"), ("protocol_session", "2025-11-25")],
)
def test_fastmcp_plays_frozen_lake_and_reads_rewards_from_structured_content(episodes, way, version):
    played = episodes[way]
    assert played["protocol_version"] == version
    steps = played["steps"]
    outcome = [(s["structured"]["reward"], s["structured"]["finished"]) for s in steps]
    assert outcome == [(0.0, False)] * (len(steps) - 1) + [(1.0, True)]
    for step in steps:
        observation = json.loads(step["text"])
        assert step["structured"] == {
            **observation,
            "reward": step["structured"]["reward"],
            "finished": step["structured"]["finished"],
        }
