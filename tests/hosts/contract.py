"""`openreward` environments using the contract of `openreward` 0.1.157-0.1.167: `Contract` has a task's own tool
(`hint`, only on tasks that have one), a conversation (`get_messages`), a `@terminal` submit and group scoring;
`Turns` has tools that take turns as `@tool(concurrent=..., exclusive=...)` says. Served by `openreward`'s own
`Server` (`python contract.py --port N`, in the openreward venv) and hosted by ours
(`--env openreward:contract:Contract@<that python>`); `tests/clients/contract_envs.py` holds the same environments
written against ors_server's API. It runs in the openreward venv only."""

from __future__ import annotations

import argparse
import asyncio

from openreward.environments import Environment, Server, TextBlock, ToolOutput, terminal, tool
from openreward.environments.types import GroupScore, ListToolsOutput, Message, ToolSpec
from pydantic import BaseModel

TASKS = [
    {"question": "2 + 2", "answer": "4", "hint": "an even number"},
    {"question": "3 + 4", "answer": "7"},
]


class Pair(BaseModel):
    a: int
    b: int


class Answer(BaseModel):
    answer: str


class Contract(Environment):
    """Arithmetic, with a hint on some tasks, a conversation, a terminal submit and group scoring."""

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return TASKS

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"What is {self.task_spec['question']}?")]

    def get_messages(self) -> list[Message]:
        return [
            Message(role="system", blocks=[TextBlock(text="Answer with a number.")]),
            Message(role="user", blocks=[TextBlock(text=f"What is {self.task_spec['question']}?")]),
        ]

    def list_task_tools(self) -> ListToolsOutput:
        if "hint" not in self.task_spec:
            return ListToolsOutput(tools=[])
        return ListToolsOutput(tools=[ToolSpec(name="hint", description="A hint for this task.", input_schema=None)])

    @tool
    def add(self, params: Pair) -> ToolOutput:
        """Add two integers."""
        return ToolOutput(blocks=[TextBlock(text=str(params.a + params.b))])

    @tool(shared=False)
    def hint(self) -> ToolOutput:
        """A hint for this task."""
        return ToolOutput(blocks=[TextBlock(text=self.task_spec["hint"])])

    @terminal
    @tool
    def submit(self, params: Answer) -> ToolOutput:
        """Your final answer; ends the episode."""
        right = params.answer.strip() == self.task_spec["answer"]
        return ToolOutput(blocks=[TextBlock(text="Correct" if right else "Wrong")], reward=float(right), finished=True)

    async def score_group(self, candidates) -> list[GroupScore]:
        scores = []
        for candidate in candidates:
            said = [m for m in candidate.messages if m.role == "assistant"]
            text = " ".join(b.text for b in said[-1].blocks if b.type == "text") if said else ""
            scores.append(GroupScore(reward=float(text.strip() == self.task_spec["answer"]), metadata={"said": text}))
        return scores


class Hold(BaseModel):
    seconds: float = 60.0
    finish: bool = False


class Turns(Environment):
    """`hold` waits until `open` is called (or its seconds pass); `peek` and `open` run alongside any call
    (concurrent); `other` is a second serialised tool; `grade` runs alone (exclusive) and ends the episode."""

    def __init__(self, task_spec: dict = {}, secrets: dict = {}) -> None:  # noqa: B006 - openreward's signature
        super().__init__(task_spec, secrets)
        self.opened = asyncio.Event()
        self.entered = asyncio.Event()
        self.holds_entered = 0
        self.holds_inside = 0

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"turns": True}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Take turns.")]

    @tool
    async def hold(self, params: Hold) -> ToolOutput:
        """Wait until `open` is called, or `seconds` pass."""
        self.holds_entered += 1
        self.holds_inside += 1
        self.entered.set()
        try:
            await asyncio.wait_for(self.opened.wait(), params.seconds)
            text = "opened"
        except TimeoutError:
            text = "timed out"
        finally:
            self.holds_inside -= 1
        return ToolOutput(blocks=[TextBlock(text=text)], reward=0.0, finished=params.finish)

    @tool(concurrent=True)
    async def peek(self) -> ToolOutput:
        """How many `hold` calls are inside and have entered, once one has."""
        await asyncio.wait_for(self.entered.wait(), 60)
        return ToolOutput(blocks=[TextBlock(text=f"inside={self.holds_inside} entered={self.holds_entered}")])

    @tool
    async def other(self) -> ToolOutput:
        """A second serialised tool."""
        return ToolOutput(blocks=[TextBlock(text="other")])

    @tool(concurrent=True)
    async def open(self) -> ToolOutput:
        """Let every `hold` go on."""
        self.opened.set()
        return ToolOutput(blocks=[TextBlock(text="open")])

    @tool(exclusive=True)
    async def grade(self) -> ToolOutput:
        """Alone: ends the episode."""
        return ToolOutput(blocks=[TextBlock(text="graded")], reward=1.0, finished=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    Server([Contract, Turns]).run(host="127.0.0.1", port=parser.parse_args().port)
