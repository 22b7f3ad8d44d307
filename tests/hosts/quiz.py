"""An `openreward` environment with several tools, splits and a secret. The same file is served by `openreward`'s
own `Server` (`python quiz.py --port N`, in the openreward venv) and by ours
(`ors-server serve --env openreward:quiz:Quiz@<that venv's python>`), so tests/hosts/test_openreward.py can hold
the two to the same answers. It runs in the openreward venv only: it imports `openreward`."""

from __future__ import annotations

import argparse
import asyncio

from openreward.environments import Environment, Server, Split, TextBlock, ToolOutput, tool
from pydantic import BaseModel

TASKS = {
    "train": [
        {"question": "2 + 2", "answer": "4"},
        {"question": "3 * 5", "answer": "15"},
        {"question": "9 - 7", "answer": "2"},
    ],
    "test": [{"question": "10 / 2", "answer": "5"}, {"question": "6 + 1", "answer": "7"}],
}


class Answer(BaseModel):
    answer: str


class Note(BaseModel):
    text: str
    times: int = 1


class Quiz(Environment):
    """Arithmetic questions, a hint, notes, and a tool that needs the API_TOKEN secret."""

    def __init__(self, task_spec: dict, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets or {})
        self.token = (secrets or {}).get("API_TOKEN")
        self.notes: list[str] = []

    @classmethod
    def list_splits(cls):
        return ["train", Split(name="test", type="test")]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return TASKS[split]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"What is {self.task_spec['question']}? Call `answer` once.")]

    @tool
    def answer(self, params: Answer) -> ToolOutput:
        """Answer the question; ends the episode."""
        right = params.answer.strip() == self.task_spec["answer"]
        return ToolOutput(
            blocks=[TextBlock(text="Correct" if right else "Wrong")],
            reward=1.0 if right else 0.0,
            finished=True,
            metadata={"expected": self.task_spec["answer"]},
        )

    @tool
    def hint(self) -> ToolOutput:
        """A hint: how many digits the answer has."""
        return ToolOutput(blocks=[TextBlock(text=f"{len(self.task_spec['answer'])} digit(s)")])

    @tool
    async def note(self, params: Note) -> ToolOutput:
        """Keep a note (async); a small reward per note."""
        await asyncio.sleep(0)
        self.notes.extend([params.text] * params.times)
        return ToolOutput(blocks=[TextBlock(text=" | ".join(self.notes))], reward=0.1 * len(self.notes))

    @tool
    def check_secret(self) -> ToolOutput:
        """Whether the API_TOKEN secret came through (never echoed)."""
        return ToolOutput(blocks=[TextBlock(text="token present" if self.token == "s3cret-token" else "no token")])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    Server([Quiz]).run(host="127.0.0.1", port=parser.parse_args().port)
