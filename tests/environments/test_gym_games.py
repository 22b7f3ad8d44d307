"""The Gymnasium adapter and the three Eval Protocol games, driven through the session core."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import gymnasium
import pytest
from gymnasium.envs.toy_text.blackjack import BlackjackEnv
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv, generate_random_map

from ors_server import Environment, GymEnvironment, ToolOutput
from ors_server.calls import ToolRejected
from ors_server.environments.blackjack import Blackjack
from ors_server.environments.cliff_walking import CliffWalking
from ors_server.environments.frozen_lake import FrozenLake
from ors_server.errors import SetupFailed
from ors_server.sessions import Session, SessionStore
from ors_server.settings import Settings
from tests.pipeline import StoreWithCalls

pytestmark = pytest.mark.anyio

START_GRIDS = {
    42: "xFHF\nFHFF\nFFFH\nFHFG",
    123: "xFFF\nFHHF\nHHFF\nHFFG",
    456: "xFFF\nHFFF\nFHFF\nFFFG",
}


@asynccontextmanager
async def episode(
    env_cls: type[Environment], task_spec: dict[str, Any], **config: Any
) -> AsyncIterator[tuple[SessionStore, Session]]:
    async with StoreWithCalls(Settings()).run() as store:
        store.create("s", env_cls, task_spec, **config)
        yield store, await store.get_ready("s")


async def step(store: SessionStore, session: Session, action: str) -> tuple[dict[str, Any], ToolOutput]:
    tool_name = session.env_cls.tool_name  # type: ignore[attr-defined]
    result = await store.call(session, tool_name, {"action": action})
    assert isinstance(result, ToolOutput), result
    [block] = result.blocks
    return json.loads(block.text), result


async def test_frozen_lake_maps_match_gymnasium_for_the_example_seeds() -> None:
    for seed, grid in START_GRIDS.items():
        reference = FrozenLakeEnv(desc=generate_random_map(size=4, p=0.8, seed=seed), is_slippery=False)
        async with episode(FrozenLake, {"seed": seed}) as (_, session):
            assert session.env.initial_observation() == {"position": 0, "grid": grid}
            assert session.env.env.unwrapped.desc.tolist() == reference.desc.tolist()


async def test_frozen_lake_seed_42_reaches_the_goal_along_the_known_path() -> None:
    async with episode(FrozenLake, {"seed": 42}) as (store, session):
        rewards, positions = [], []
        for action in ["DOWN", "DOWN", "RIGHT", "RIGHT", "DOWN", "RIGHT"]:
            observation, output = await step(store, session, action)
            rewards.append(output.reward)
            positions.append(observation["position"])
        assert positions == [4, 8, 9, 10, 14, 15]
        assert rewards == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
        assert output.finished and not output.truncated
        assert session.finished and session.total_reward == 1.0


async def test_frozen_lake_hole_ends_the_episode_without_reward() -> None:
    async with episode(FrozenLake, {"seed": 42}) as (store, session):
        await step(store, session, "DOWN")
        observation, output = await step(store, session, "RIGHT")
        assert observation["position"] == 5
        assert (output.reward, output.finished) == (0.0, True)


async def test_tool_result_is_one_text_block_with_the_compact_observation_and_normalized_action() -> None:
    async with episode(FrozenLake, {"seed": 42}) as (store, session):
        result = await store.call(session, "lake_move", {"action": "  down "})
        assert isinstance(result, ToolOutput)
        assert result.blocks[0].text == '{"position":4,"grid":"SFHF\\nxHFF\\nFFFH\\nFHFG","action":"DOWN"}'
        assert result.metadata == {"prob": 1.0}


async def test_invalid_action_is_an_input_error_listing_the_valid_actions_and_leaves_the_state_unchanged() -> None:
    async with episode(FrozenLake, {"seed": 42}) as (store, session):
        result = await store.call(session, "lake_move", {"action": "jump"})
        assert isinstance(result, ToolRejected) and result.reason == "input_validation", result
        assert "Invalid action 'JUMP'. Valid actions: ['LEFT', 'DOWN', 'RIGHT', 'UP']" in result.message
        assert session.step_count == 0 and not session.finished and session.env.steps == 0
        observation, _ = await step(store, session, "down")
        assert observation["position"] == 4


async def test_missing_action_is_an_input_validation_error() -> None:
    async with episode(FrozenLake, {"seed": 42}) as (store, session):
        result = await store.call(session, "lake_move", {})
        assert isinstance(result, ToolRejected) and result.reason == "input_validation"


def _escapes(value: Any) -> list[str]:
    """The strings in a JSON value that hold an escape character (ANSI colours start with one)."""
    if isinstance(value, str):
        return [value] if "\x1b" in value else []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [text for item in value for text in _escapes(item)]
    return []


@pytest.mark.parametrize(
    ("env_cls", "action"),
    [(FrozenLake, "DOWN"), (CliffWalking, "UP"), (Blackjack, "HIT")],
    ids=["frozen_lake", "cliff_walking", "blackjack"],
)
async def test_game_prompts_and_observations_are_plain_text(env_cls: type[GymEnvironment], action: str) -> None:
    async with episode(env_cls, {"seed": 42}) as (store, session):
        [prompt] = session.env.get_prompt()
        observation, _ = await step(store, session, action)
        assert "\x1b" not in prompt.text and "\\u001b" not in prompt.text
        assert _escapes(session.env.initial_observation()) == [] and _escapes(observation) == []


async def test_frozen_lake_grid_marks_the_agent_with_x_on_the_plain_map() -> None:
    async with episode(FrozenLake, {"seed": 42}) as (store, session):
        observation, _ = await step(store, session, "DOWN")
        assert observation["grid"] == "SFHF\nxHFF\nFFFH\nFHFG"
        observation, _ = await step(store, session, "RIGHT")  # into the hole at 5
        assert observation["grid"] == "SFHF\nFxFF\nFFFH\nFHFG"


class AnsiTaxi(GymEnvironment):
    env_id = "Taxi-v4"
    render_mode = "ansi"
    tool_name = "taxi_move"
    action_names = ["SOUTH", "NORTH", "EAST", "WEST", "PICKUP", "DROPOFF"]

    def observe(self, obs: Any) -> dict[str, Any]:
        assert self.env is not None
        return {"state": int(obs), "map": self.env.render()}


async def test_ansi_escapes_of_any_gym_render_are_removed_from_observations() -> None:
    async with episode(AnsiTaxi, {"seed": 7}) as (store, session):
        assert "\x1b[" in session.env.env.render(), "the render this test relies on is coloured"
        initial = session.env.initial_observation()
        observation, _ = await step(store, session, "north")
        assert _escapes(initial) == [] and _escapes(observation) == []
        assert "|R: | : :G|" in initial["map"]  # the map itself is kept


async def test_cliff_walking_cliff_costs_100_and_sends_the_agent_back_to_the_start() -> None:
    async with episode(CliffWalking, {"seed": 42}) as (store, session):
        start = session.env.initial_observation()
        assert start["position"] == 36
        assert start["grid"].endswith("x  C  C  C  C  C  C  C  C  C  C  T\n\n")
        observation, output = await step(store, session, "RIGHT")
        assert (observation["position"], output.reward, output.finished) == (36, -100.0, False)
        await step(store, session, "UP")
        for _ in range(11):
            observation, output = await step(store, session, "RIGHT")
        observation, output = await step(store, session, "DOWN")
        assert (observation["position"], output.reward, output.finished) == (47, -1.0, True)
        assert observation["grid"].endswith("o  C  C  C  C  C  C  C  C  C  C  x\n\n")
        assert session.total_reward == -100.0 - 13


async def test_blackjack_initial_observations_match_gymnasium() -> None:
    expected = {42: (15, 2, 0), 123: (19, 1, 1), 456: (13, 5, 0)}
    for seed, (player_sum, dealer_card, usable_ace) in expected.items():
        async with episode(Blackjack, {"seed": seed}) as (_, session):
            assert session.env.initial_observation() == {
                "player_sum": player_sum,
                "dealer_card": dealer_card,
                "usable_ace": usable_ace,
            }


@pytest.mark.parametrize("actions", [["STICK"], ["HIT", "STICK"], ["HIT", "HIT", "HIT"]])
async def test_blackjack_rewards_match_gymnasium_for_the_same_seed(actions: list[str]) -> None:
    for seed in (42, 123, 456, 7):
        reference = BlackjackEnv()
        reference.reset(seed=seed)
        async with episode(Blackjack, {"seed": seed}) as (store, session):
            for action in actions:
                obs, reward, terminated, _, _ = reference.step(Blackjack.actions[action])
                observation, output = await step(store, session, action)
                assert (observation["player_sum"], observation["dealer_card"], observation["usable_ace"]) == obs
                assert (output.reward, output.finished) == (reward, terminated)
                if terminated:
                    break


async def test_blackjack_natural_rule_comes_from_the_task_spec() -> None:
    async with episode(Blackjack, {"seed": 1, "natural": True, "sab": False}) as (_, session):
        env = session.env.env
        assert (env.natural, env.sab) == (True, False)


async def test_episode_ends_truncated_at_the_step_limit() -> None:
    async with episode(CliffWalking, {"seed": 0, "max_steps": 3}) as (store, session):
        outputs = [(await step(store, session, "LEFT"))[1] for _ in range(3)]
        assert [(o.finished, o.truncated) for o in outputs] == [(False, False), (False, False), (True, True)]
        assert session.finished and session.truncated
        result = await store.call(session, "cliff_move", {"action": "LEFT"})
        assert isinstance(result, ToolRejected) and result.reason == "episode_finished"


async def test_a_real_ending_on_the_last_allowed_step_is_not_truncated() -> None:
    async with episode(FrozenLake, {"seed": 42, "max_steps": 2}) as (store, session):
        await step(store, session, "DOWN")
        _, output = await step(store, session, "RIGHT")  # into the hole at 5
        assert output.finished and not output.truncated


async def test_class_step_limit_applies_without_a_task_override() -> None:
    class ShortCliff(CliffWalking):
        name = "short_cliff"
        max_steps = 1

    async with episode(ShortCliff, {"seed": 0}) as (store, session):
        _, output = await step(store, session, "LEFT")
        assert output.finished and output.truncated


async def test_invalid_seed_fails_setup() -> None:
    async with StoreWithCalls(Settings()).run() as store:
        store.create("s", FrozenLake, {"seed": "forty-two"})
        with pytest.raises(SetupFailed, match="'seed' must be a non-negative integer"):
            await store.get_ready("s")


async def test_unseeded_task_draws_a_seed_and_names_it_in_the_task_spec() -> None:
    async with episode(FrozenLake, {}) as (_, session):
        seed = session.env.task_spec["seed"]
        desc = generate_random_map(size=4, p=0.8, seed=seed)
        assert session.env.initial_observation()["grid"].split("\n")[1:] == desc[1:]


def test_train_split_is_large_and_served_lazily() -> None:
    assert FrozenLake.num_tasks("train") == 1_000_000
    assert FrozenLake.get_task("train", 999_999) == {"map_name": "4x4", "seed": 999_999}
    assert FrozenLake.get_task_range("train", -2, None) == [
        {"map_name": "4x4", "seed": 999_998},
        {"map_name": "4x4", "seed": 999_999},
    ]
    with pytest.raises(NotImplementedError):
        FrozenLake.list_tasks("train")
    with pytest.raises(ValueError, match="at most"):
        FrozenLake.get_task_range("train", None, None)
    with pytest.raises(IndexError):
        FrozenLake.get_task("train", 1_000_000)


def test_test_split_seeds_are_disjoint_from_train() -> None:
    seeds = [task["seed"] for task in FrozenLake.list_tasks("test")]
    assert len(seeds) == FrozenLake.num_tasks("test") == 1_000
    assert min(seeds) >= FrozenLake.num_tasks("train")


def test_examples_split_holds_the_eval_protocol_rows() -> None:
    assert FrozenLake.list_tasks("examples") == [
        {"game": "FrozenLake", "map_name": "4x4", "seed": seed} for seed in (42, 123, 456)
    ]
    assert CliffWalking.list_tasks("examples")[0] == {"game": "CliffWalking", "seed": 42}
    assert Blackjack.list_tasks("examples")[2] == {"game": "Blackjack", "natural": False, "sab": False, "seed": 456}


def test_task_from_seed_turns_an_eval_protocol_row_into_the_task_spec() -> None:
    config = {"game": "FrozenLake", "map_name": "4x4", "seed": 42}
    assert FrozenLake.task_from_seed(42, config) == config
    assert FrozenLake.task_from_seed(123, config)["seed"] == 123
    assert FrozenLake.task_from_seed(None, config)["seed"] == 42
    assert FrozenLake.task_from_seed(None, {"split": "test", "index": 2}) == FrozenLake.get_task("test", 2)


async def test_reset_with_a_new_seed_rebuilds_the_seeded_map() -> None:
    config = {"game": "FrozenLake", "map_name": "4x4", "seed": 42}
    async with episode(FrozenLake, FrozenLake.task_from_seed(42, config), seed=42, config=config) as (store, session):
        await step(store, session, "DOWN")
        await store.reset(session, 123)
        assert session.step_count == 0
        assert session.env.initial_observation()["grid"] == START_GRIDS[123]


async def test_prompt_names_the_tool_and_actions_and_shows_the_initial_observation() -> None:
    async with episode(FrozenLake, {"seed": 42}) as (_, session):
        [block] = session.env.get_prompt()
        assert "lake_move" in block.text and "LEFT, DOWN, RIGHT, UP" in block.text
        assert block.text.endswith('{"position":0,"grid":"xFHF\\nFHFF\\nFFFH\\nFHFG"}')
        assert "x marks your current cell" in block.text


def test_game_tools_have_the_eval_protocol_names_and_input_schema() -> None:
    for env_cls, tool_name in [(FrozenLake, "lake_move"), (CliffWalking, "cliff_move"), (Blackjack, "blackjack_move")]:
        [tool] = env_cls.tools.values()
        assert tool.name == tool_name and tool.description
        schema = tool.schema
        assert schema["type"] == "object" and schema["required"] == ["action"]
        assert schema["properties"]["action"]["type"] == "string"
        assert schema["properties"]["action"]["enum"] == list(env_cls.actions)


class Taxi(GymEnvironment):
    env_id = "Taxi-v4"
    tool_name = "taxi_move"
    action_names = ["SOUTH", "NORTH", "EAST", "WEST", "PICKUP", "DROPOFF"]


async def test_a_gymnasium_environment_not_shipped_here_is_served_in_a_few_lines() -> None:
    # Taxi-v3, Eval Protocol's usual example, is deprecated in gymnasium 1.x (making it raises); v4 is current.
    reference = gymnasium.make("Taxi-v4")
    obs, _ = reference.reset(seed=7)
    async with episode(Taxi, {"seed": 7}) as (store, session):
        assert session.env.initial_observation() == {"observation": obs}
        for action in ["south", "NORTH", "West", "pickup"]:
            obs, reward, terminated, truncated, info = reference.step(Taxi.actions[action.upper()])
            observation, output = await step(store, session, action)
            assert observation == {"observation": obs, "action": action.upper()}
            assert (output.reward, output.finished) == (reward, terminated or truncated)
            assert output.metadata["action_mask"] == info["action_mask"].tolist()
    assert list(Taxi.tools) == ["taxi_move"]
    assert "SOUTH, NORTH, EAST, WEST, PICKUP, DROPOFF" in Taxi.tools["taxi_move"].description


def test_a_subclass_renaming_the_tool_replaces_the_inherited_one() -> None:
    class Lake(FrozenLake):
        name = "lake"
        tool_name = "move"

    assert list(Lake.tools) == ["move"] and list(FrozenLake.tools) == ["lake_move"]


class ThreadNoting(FrozenLake):
    """FrozenLake noting the thread each step ran on."""

    name = "thread_noting"
    step_inline = False
    threads: list[str] = []

    def observe(self, obs: Any) -> dict[str, Any]:
        ThreadNoting.threads.append(threading.current_thread().name)
        return super().observe(obs)


class InlineThreadNoting(ThreadNoting):
    name = "inline_thread_noting"
    step_inline = True


@pytest.mark.parametrize(("env_cls", "on_loop"), [(ThreadNoting, False), (InlineThreadNoting, True)])
async def test_a_step_inline_env_steps_on_the_event_loop_and_others_on_tool_threads(
    env_cls: type[ThreadNoting], on_loop: bool
) -> None:
    async with episode(env_cls, {"seed": 42}) as (store, session):
        ThreadNoting.threads.clear()  # setup observed the start on a lifecycle thread
        observation, _ = await step(store, session, "DOWN")
    assert observation["action"] == "DOWN"
    assert (ThreadNoting.threads == [threading.current_thread().name]) is on_loop, ThreadNoting.threads


def test_the_toy_text_games_step_inline() -> None:
    assert FrozenLake.step_inline and Blackjack.step_inline and CliffWalking.step_inline
