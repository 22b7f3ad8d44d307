"""The environments the `ors-client` tests play on our server; `scripts/client_envs_reference.py` defines the
same ones for `openreward`'s reference server, so one client script checks both servers alike.

- `quiz`: one arithmetic question per task, a `submit` tool; a task with `"broken": true` fails its setup.
- `toolbox`: several tools in one episode (`add`, `note`, `finish`), a tool that raises (`crash`), a slow one
  (`slow`, which counts its runs so a resumed call shows it ran once), a large result (`big`, several SSE
  chunks, some starting with a space) and `check_secret`, which says whether the `API_TOKEN` secret matches.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from ors_server import Environment, Split, TextBlock, ToolOutput, tool

QUIZ = [{"question": f"What is {a}+{b}?", "answer": str(a + b)} for a, b in [(2, 2), (3, 4), (5, 8), (1, 9), (6, 6)]]


class Answer(BaseModel):
    answer: str


class Quiz(Environment):
    @classmethod
    def list_splits(cls) -> list[str | Split]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [dict(task) for task in QUIZ]

    def setup(self) -> None:
        if self.task_spec.get("broken"):
            raise RuntimeError("this environment is broken")

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=self.task_spec["question"])]

    @tool
    def submit(self, params: Answer) -> ToolOutput:
        """Submit the answer; ends the episode."""
        right = params.answer.strip() == self.task_spec["answer"]
        return ToolOutput(blocks=[TextBlock(text="Correct!" if right else "Wrong")], reward=float(right), finished=True)


class Pair(BaseModel):
    a: int
    b: int


class Text(BaseModel):
    text: str


class Seconds(BaseModel):
    seconds: float


class Size(BaseModel):
    chars: int


class Toolbox(Environment):
    def __init__(self, task_spec: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets)
        self.notes: list[str] = []
        self.slow_runs = 0

    @classmethod
    def list_splits(cls) -> list[str | Split]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{"expect": "s3cret"}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Add, take notes, then finish.")]

    @tool
    def add(self, params: Pair) -> ToolOutput:
        """Add two integers."""
        return ToolOutput(blocks=[TextBlock(text=str(params.a + params.b))])

    @tool
    def note(self, params: Text) -> ToolOutput:
        """Keep a note."""
        self.notes.append(params.text)
        return ToolOutput(blocks=[TextBlock(text=f"{len(self.notes)} notes")], reward=0.5)

    @tool
    def finish(self) -> ToolOutput:
        """End the episode; the reward is the number of notes."""
        return ToolOutput(blocks=[TextBlock(text=" | ".join(self.notes))], reward=float(len(self.notes)), finished=True)

    @tool
    def crash(self) -> ToolOutput:
        """Raise."""
        raise RuntimeError("kaboom")

    @tool
    def slow(self, params: Seconds) -> ToolOutput:
        """Sleep, then say how many times this tool has run in the episode."""
        time.sleep(params.seconds)
        self.slow_runs += 1
        return ToolOutput(blocks=[TextBlock(text=f"slept {self.slow_runs}")])

    @tool
    def big(self, params: Size) -> ToolOutput:
        """A long text, with runs of spaces."""
        return ToolOutput(blocks=[TextBlock(text=big_text(params.chars))])

    @tool
    def check_secret(self) -> ToolOutput:
        """Whether the API_TOKEN secret is the one the task expects."""
        same = self.secrets.get("API_TOKEN") == self.task_spec.get("expect")
        return ToolOutput(blocks=[TextBlock(text="match" if same else "no match")])


def big_text(chars: int) -> str:
    return "".join(f"{i % 10}{' ' * (i % 7)}" for i in range(chars))[:chars]
