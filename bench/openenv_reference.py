"""The OpenEnv baseline for workload o: FrozenLake as an OpenEnv 0.10 `MCPEnvironment`, served by OpenEnv's own
`create_app`, started as OpenEnv's docs start a server: `uvicorn bench.openenv_reference:app --port PORT`
(from the `openenv` bench venv, which has `openenv==0.10.0` and gymnasium).

The environment is the one our `frozen_lake` serves: the tool `lake_move {"action"}` on gymnasium's
`FrozenLakeEnv` with a 4x4 `generate_random_map(seed)` map, not slippery; it answers the same compact JSON
observation text, and a step's reward and done are gymnasium's.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from fastmcp import FastMCP
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv, generate_random_map
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Observation, State

ACTIONS = {"LEFT": 0, "DOWN": 1, "RIGHT": 2, "UP": 3}


class LakeObservation(Observation):
    position: int
    grid: str


class FrozenLakeTools(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        server = FastMCP("frozen_lake")

        @server.tool
        def lake_move(action: str) -> str:
            """Move on the frozen lake. Actions: LEFT, DOWN, RIGHT, UP. Returns the new observation."""
            return self._move(action)

        super().__init__(server)
        self._lake: FrozenLakeEnv | None = None
        self._state = State(episode_id=None, step_count=0)
        self._outcome: tuple[float, bool] = (0.0, False)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> LakeObservation:
        self._lake = FrozenLakeEnv(desc=generate_random_map(size=4, p=0.8, seed=seed), render_mode="ansi")
        position, _ = self._lake.reset(seed=seed)
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        self._outcome = (0.0, False)
        return LakeObservation(position=int(position), grid=self._lake.render(), reward=0.0, done=False)

    def _move(self, action: str) -> str:
        name = action.strip().upper()
        if name not in ACTIONS:
            raise ValueError(f"Invalid action '{name}'. Valid actions: {list(ACTIONS)}")
        if self._lake is None:
            raise RuntimeError("no episode: reset first")
        position, reward, terminated, truncated, _ = self._lake.step(ACTIONS[name])
        self._outcome = (float(reward), bool(terminated or truncated))
        return json.dumps(
            {"position": int(position), "grid": self._lake.render(), "action": name}, separators=(",", ":")
        )

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(observation, CallToolObservation) and observation.error is None:
            self._state.step_count += 1
            observation.reward, observation.done = self._outcome
        return observation

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(done=False, reward=None, metadata={"error": f"unsupported action {type(action).__name__}"})

    @property
    def state(self) -> State:
        return self._state


app = create_app(FrozenLakeTools, CallToolAction, CallToolObservation, env_name="frozen_lake", max_concurrent_envs=64)
