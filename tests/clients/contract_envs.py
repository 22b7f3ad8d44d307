"""`contract`, written against ors_server's API: the same environment as `tests/hosts/contract.py` (an `openreward`
one), so one client script (`scripts/openreward_contract.py`) holds ours, natively and hosted, and `openreward`'s
own server to the same answers: a task's own `hint` tool, a conversation, a `@terminal` submit, group scoring."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from ors_server import Environment, GroupCandidate, GroupScore, Message, Split, TextBlock, ToolOutput, terminal, tool

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
    def list_splits(cls) -> list[str | Split]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return TASKS

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"What is {self.task_spec['question']}?")]

    def get_messages(self) -> list[Message]:
        return [
            Message(role="system", blocks=[TextBlock(text="Answer with a number.")]),
            Message(role="user", blocks=[TextBlock(text=f"What is {self.task_spec['question']}?")]),
        ]

    def list_task_tools(self) -> list[str]:
        return ["hint"] if "hint" in self.task_spec else []

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

    async def score_group(self, candidates: Sequence[GroupCandidate]) -> list[GroupScore]:
        scores = []
        for candidate in candidates:
            text = candidate.final_answer()
            scores.append(GroupScore(reward=float(text.strip() == self.task_spec["answer"]), metadata={"said": text}))
        return scores
