"""Environments for bench/scale.py: a CPU-bound tool and a free one."""

from __future__ import annotations

from pydantic import BaseModel

from ors_server import Environment, TextBlock, ToolOutput, tool


class BurnInput(BaseModel):
    n: int = 200_000


class Burn(Environment):
    """`burn` spends ~15 ms of pure Python (it holds the GIL throughout); `noop` costs nothing."""

    name = "burn"

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{}]

    def get_prompt(self):
        return [TextBlock(text="burn")]

    @tool
    async def burn(self, params: BurnInput) -> ToolOutput:
        """A CPU-bound step (async, so the call's thread is the event loop's: the GIL is the limit)."""
        total = 0
        for i in range(params.n):
            total += i * i % 7
        return ToolOutput(blocks=[TextBlock(text=str(total))], reward=0.0)

    @tool
    async def noop(self) -> ToolOutput:
        """Nothing at all."""
        return ToolOutput(blocks=[TextBlock(text="ok")], reward=0.0)
