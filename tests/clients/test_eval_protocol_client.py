"""Eval Protocol 0.3.33's real rollout client (MCP data plane + `/{env}/control/*`), from its own venv,
with a scripted policy in place of an LLM (eval-protocol-mcp-gym.md §3.2), against `ors-server serve`.

One script run plays every scenario (EP takes seconds to import); each test asserts on one scenario.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_script

pytestmark = pytest.mark.clients

SCENARIOS = ["frozen_lake", "cliff_walking", "blackjack", "concurrent", "repeat"]
FROZEN_LAKE_SEED_42 = "xFHF/FHFF/FFFH/FHFG"  # the map SFHF/FHFF/FFFH/FHFG, the agent (x) on S
CONTROL_PLANE = {"reward_source": "control_plane_endpoint", "status_source": "control_plane_endpoint"}


@pytest.fixture(scope="module")
def rollouts(eval_protocol_python, server, tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("ep-home")
    return run_script(
        eval_protocol_python, "ep_rollout.py", server.url, *SCENARIOS, home=home, server=server, timeout=240
    )


def scenario(rollouts: dict, name: str):
    result = rollouts[name]
    if isinstance(result, dict) and "error" in result:
        pytest.fail(f"scenario {name} raised in the EP client:\n{result['error']}")
    return result


def grid_rows(observation: dict) -> str:
    """FrozenLake's grid as `ROW/ROW/...`: plain text, no ANSI escapes."""
    assert "\x1b" not in observation["grid"], observation
    return observation["grid"].replace("\n", "/")


def assert_reads_the_control_plane(row: dict) -> None:
    # EP falls back to reward 0 / not done without a word when a control-plane request fails.
    assert row["step_sources"] == [CONTROL_PLANE] * row["steps"], row["step_sources"]


def test_frozen_lake_seed_42_is_won_in_six_steps(rollouts):
    row = scenario(rollouts, "frozen_lake")

    assert row["initial_observation"]["position"] == 0
    assert grid_rows(row["initial_observation"]) == FROZEN_LAKE_SEED_42
    assert (row["steps"], row["total_reward"], row["termination_reason"]) == (6, 1.0, "stop")
    assert row["step_rewards"] == [0.0] * 5 + [1.0]
    assert row["step_terminated"] == [False] * 5 + [True]
    assert [obs["position"] for obs in row["observations"]] == [4, 8, 9, 10, 14, 15]
    assert [obs["action"] for obs in row["observations"]] == ["DOWN", "DOWN", "RIGHT", "RIGHT", "DOWN", "RIGHT"]
    assert_reads_the_control_plane(row)


def test_cliff_walking_falls_once_then_walks_round_for_minus_113(rollouts):
    row = scenario(rollouts, "cliff_walking")

    assert row["initial_observation"]["position"] == 36
    assert row["initial_observation"]["grid"].splitlines()[3].split() == ["x", *["C"] * 10, "T"]
    assert (row["steps"], row["total_reward"], row["termination_reason"]) == (14, -113.0, "stop")
    assert row["step_rewards"] == [-100.0] + [-1.0] * 13
    assert row["observations"][0]["position"] == 36, "the cliff sends the agent back to the start"
    assert row["observations"][-1]["position"] == 47
    assert row["step_terminated"] == [False] * 13 + [True]
    assert_reads_the_control_plane(row)


def test_blackjack_seed_42_deals_15_against_2(rollouts):
    row = scenario(rollouts, "blackjack")

    assert row["initial_observation"] == {"player_sum": 15, "dealer_card": 2, "usable_ace": 0}
    assert row["steps"] == 1
    assert row["step_terminated"] == [True]
    # Sticking on 15 against a 2: gymnasium's dealer, drawn from the seed-42 generator, busts.
    assert row["total_reward"] == 1.0
    assert row["termination_reason"] == "stop"
    assert_reads_the_control_plane(row)


def test_eight_concurrent_rollouts_do_not_cross_talk(rollouts):
    rows = scenario(rollouts, "concurrent")

    assert sorted(row["row_id"] for row in rows) == [f"fl_concurrent_{i}" for i in range(8)]
    for row in rows:
        # Any move applied to another row's lake would break the six-step win.
        assert grid_rows(row["initial_observation"]) == FROZEN_LAKE_SEED_42, row["row_id"]
        assert (row["steps"], row["total_reward"], row["termination_reason"]) == (6, 1.0, "stop"), row["row_id"]
        assert [obs["position"] for obs in row["observations"]] == [4, 8, 9, 10, 14, 15], row["row_id"]
        assert_reads_the_control_plane(row)


@pytest.mark.parametrize("game", ["frozen_lake", "blackjack"])
def test_the_same_row_twice_starts_the_same_and_scores_the_same(rollouts, game):
    first, second = scenario(rollouts, "repeat")[game]

    # EP derives the session id from the row alone, so the second run reuses the first run's id.
    assert first["initial_text"] == second["initial_text"]
    assert first["initial_observation"] is not None
    assert (first["steps"], first["total_reward"]) == (second["steps"], second["total_reward"])
    assert first["step_rewards"] == second["step_rewards"]
    assert first["termination_reason"] == second["termination_reason"] == "stop"
    if game == "frozen_lake":
        assert grid_rows(first["initial_observation"]) == FROZEN_LAKE_SEED_42
        assert first["total_reward"] == 1.0
    else:
        assert first["initial_observation"] == {"player_sum": 15, "dealer_card": 2, "usable_ace": 0}


def test_rollouts_leave_no_live_sessions(rollouts):
    # EP ends every rollout with reset_session, then DELETE of its MCP transport, which ends the episode.
    if rollouts["live_sessions_after"] is None:
        pytest.skip("the server publishes no ors_live_sessions gauge at /metrics")
    assert rollouts["live_sessions_after"] == 0
