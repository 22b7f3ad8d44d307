"""`calculator`: exact arithmetic too large to do in one's head, with the tools of a composed MCP server.

The environment has one tool of its own, `submit`. Its `calc` tool server
(`ors_server.environments.tool_servers.calc`, an MCP server over stdio, one process per episode) adds
`calc__evaluate` and `calc__factorize`. The tasks are made from the task index: 50 train and 20 test, half
"evaluate this expression", half "the largest prime factor of".
"""

from __future__ import annotations

import random
import sys
from typing import Any

from pydantic import BaseModel, Field

from ors_server import Environment, InvalidTaskSpec, Split, StdioServer, TextBlock, ToolOutput, tool

SIZES = {"train": 50, "test": 20}


def _task(split: str, index: int) -> dict[str, Any]:
    rng = random.Random(f"{split}-{index}")
    if index % 2 == 0:
        a, b, c, d = (rng.randrange(10_000, 100_000) for _ in range(4))
        return {"question": f"What is {a} * {b} - {c} * {d}?", "answer": a * b - c * d}
    p, q = sorted(rng.choice(_PRIMES) for _ in range(2))
    n = p * q * rng.randrange(2, 50)
    return {"question": f"What is the largest prime factor of {n}?", "answer": _largest_prime_factor(n)}


def _largest_prime_factor(n: int) -> int:
    factor, d = 1, 2
    while d * d <= n:
        while n % d == 0:
            factor, n = d, n // d
        d += 1
    return max(factor, n)


_PRIMES = [p for p in range(1_000, 5_000) if all(p % d for d in range(2, int(p**0.5) + 1))]


class SubmitInput(BaseModel):
    answer: int = Field(description="Your final answer, an integer")


class Calculator(Environment):
    name = "calculator"
    mcp_servers = [StdioServer("calc", [sys.executable, "-m", "ors_server.environments.tool_servers.calc"])]

    @classmethod
    def list_splits(cls) -> list[str | Split]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [_task(split, index) for index in range(SIZES[split])]

    async def setup(self) -> None:
        spec = self.task_spec if isinstance(self.task_spec, dict) else {}
        answer = spec.get("answer")
        if not (isinstance(spec.get("question"), str) and isinstance(answer, int) and not isinstance(answer, bool)):
            raise InvalidTaskSpec('a calculator task spec is {"question": str, "answer": int}')

    def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(
                text=f"{self.task_spec['question']}\n\nUse the calc tools to compute it exactly, then call `submit` "
                "once with the integer."
            )
        ]

    @tool
    def submit(self, params: SubmitInput) -> ToolOutput:
        """Submit your final answer. Ends the episode."""
        correct = params.answer == int(self.task_spec["answer"])
        return ToolOutput(
            blocks=[TextBlock(text="Correct!" if correct else "Wrong")],
            reward=1.0 if correct else 0.0,
            finished=True,
        )
