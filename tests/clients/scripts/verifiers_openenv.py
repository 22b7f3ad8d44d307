"""verifiers 0.4's OpenEnv taskset (`verifiers.v1.tasksets.openenv`) against our OpenEnv face, played by a scripted
agent in place of a model: `verifiers_openenv.py BASE_URL ...` (environments' OpenEnv base URLs).

Its own code runs: `OpenEnvTaskset` loads the task, `OpenEnvEnv.run` opens `GenericEnvClient(base_url)`, reads
`/schema`, resets, and steps with `parse_action(reply, schema)` for each reply until `done`; the agent answers each
observation with `{"tool_name": "lake_move", "arguments": {"action": ...}}` (no `type`, as a model following the
taskset's prompt writes it), walking to the goal. Prints one line `ORS-CLIENT-RESULT <json>`. Runs in the
verifiers venv.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from types import SimpleNamespace

from _common import lake_route
from verifiers.v1.tasksets.openenv.taskset import OpenEnvConfig, OpenEnvEnv, OpenEnvTaskset


class Trace:
    def __init__(self) -> None:
        self.rewards: dict[str, float] = {}
        self.stopped: str | None = None

    def record_reward(self, name: str, value: float) -> None:
        self.rewards[name] = value

    def stop(self, reason: str) -> None:
        self.stopped = reason


class Interaction:
    """The engine's side of a model turn: it hands the agent a payload and reads the agent's reply."""

    def __init__(self) -> None:
        self.trace = Trace()
        self.payloads: list[dict] = []
        self.replies: list[str] = []
        self.plan: list[str] | None = None

    async def turn(self, payload: str) -> SimpleNamespace:
        seen = json.loads(payload)
        self.payloads.append(seen)
        if self.plan is None:
            self.plan = lake_route(seen["observation"]["grid"].split("\n"))
        move = self.plan.pop(0)
        reply = json.dumps({"tool_name": "lake_move", "arguments": {"action": move}})
        self.replies.append(reply)
        return SimpleNamespace(terminated=False, last_reply=reply)


class Player:
    def __init__(self) -> None:
        self.interactions: list[Interaction] = []

    @contextlib.asynccontextmanager
    async def interaction(self, task):
        interaction = Interaction()
        self.interactions.append(interaction)
        yield interaction


async def play(base_url: str) -> dict:
    taskset = OpenEnvTaskset(OpenEnvConfig(base_url=base_url, resets=[{"seed": 0}]))
    [task] = list(taskset.load())
    player = Player()
    # `run` is the taskset's episode loop and reads nothing of its env object: called as is, without the engine
    # (whose env construction loads a harness and a model client).
    await OpenEnvEnv.run(None, task, SimpleNamespace(player=player))  # type: ignore[arg-type]
    [interaction] = player.interactions
    first = interaction.payloads[0]
    return {
        "rewards": interaction.trace.rewards,
        "stopped": interaction.trace.stopped,
        "replies": interaction.replies,
        "first_observation": first["observation"],
        "errors": [p["observation"].get("error") for p in interaction.payloads[1:]],
    }


async def main() -> None:
    seen = [await play(base_url) for base_url in sys.argv[1:]]
    print("ORS-CLIENT-RESULT " + json.dumps(seen), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
