"""bench/envs.py's `Counter`, written for OpenEnv as an `MCPEnvironment` (runs in its venv only): for
bench/hosted.py --openenv. Its one MCP tool `tick` goes through OpenEnv's in-memory FastMCP client, as every
tool of an OpenEnv MCP environment does."""

from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State


class CounterEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("counter")
        self.count = 0
        self._state = State()

        @mcp.tool
        def tick() -> str:
            """Add one to the counter."""
            self.count += 1
            return str(self.count)

        super().__init__(mcp)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="counter", description="Call `tick` as often as you like.")

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        self.count = int(kwargs.get("start", 0))
        return Observation(reward=0.0)

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        raise ValueError("call_tool only")

    @property
    def state(self) -> State:
        return self._state
