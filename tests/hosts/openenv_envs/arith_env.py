"""An OpenEnv `MCPEnvironment`: a sum to work out with an `add` tool, answered with `submit` (reward 1 or 0).

Written against OpenEnv 0.10 and FastMCP only (it runs in OpenEnv's venv, under OpenEnv's own `create_app` and
hosted by ors-server with `--env openenv:arith_env:ArithEnvironment@PYTHON`). The reward and the end of the
episode are set in `step_async`, as OpenEnv's MCP environments do; `fail` raises, for error paths.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State


class QuestionObservation(Observation):
    question: str


class ArithEnvironment(MCPEnvironment):
    """Add two numbers with the `add` tool and submit the sum."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("arith")
        self._terms = (0, 0)
        self._submitted: int | None = None
        self._state = State()

        @mcp.tool
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @mcp.tool
        def submit(answer: int) -> str:
            """Submit the sum; ends the episode."""
            self._submitted = answer
            return "correct" if answer == sum(self._terms) else "wrong"

        @mcp.tool
        def fail(reason: str) -> str:
            """Always raises."""
            raise ValueError(f"failed on purpose: {reason}")

        super().__init__(mcp)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="arith", description="Add two numbers and submit the sum.", version="0.1.0")

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> QuestionObservation:
        rng = random.Random(seed)
        self._terms = (rng.randint(10, 99), rng.randint(10, 99))
        self._submitted = None
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        a, b = self._terms
        return QuestionObservation(question=f"What is {a} + {b}?", reward=0.0)

    def _score(self, action: Action, observation: Observation) -> Observation:
        self._state.step_count += 1
        if isinstance(action, CallToolAction) and action.tool_name == "submit" and self._submitted is not None:
            observation.reward = 1.0 if self._submitted == sum(self._terms) else 0.0
            observation.done = True
        return observation

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._score(action, super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._score(action, await super().step_async(action, timeout_s=timeout_s, **kwargs))

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        raise ValueError(f"unsupported action {type(action).__name__}: use call_tool")

    @property
    def state(self) -> State:
        return self._state
