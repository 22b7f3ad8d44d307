"""Environments the benchmark serves with `ors-server serve --env bench.envs:Counter`."""

from __future__ import annotations

from ors_server import Environment, TextBlock, ToolOutput, tool


class Counter(Environment):
    """A never-ending episode whose one tool is as cheap as a tool can be: the call path is all that is measured."""

    name = "counter"

    def __init__(self, task_spec=None, secrets=None) -> None:
        super().__init__(task_spec, secrets)
        self.count = 0

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{"start": 0}]

    def get_prompt(self):
        return [TextBlock(text="Call `tick` as often as you like.")]

    @tool
    def tick(self) -> ToolOutput:
        """Add one to the counter."""
        self.count += 1
        return ToolOutput(blocks=[TextBlock(text=str(self.count))], reward=0.0, finished=False)


class AsyncCounter(Counter):
    """Counter with an `async` tool: no worker-thread hop, to price `to_thread` on the call path."""

    name = "acounter"

    @tool
    async def tick(self) -> ToolOutput:
        """Add one to the counter."""
        self.count += 1
        return ToolOutput(blocks=[TextBlock(text=str(self.count))], reward=0.0, finished=False)
