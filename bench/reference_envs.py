"""The benchmark's environments for the reference server (`openreward.environments`), run in its own venv:

    bench/.venvs/openreward/bin/python bench/reference_envs.py --port 8001

They match `bench/envs.py` (Counter) and `ors_server/environments/math.py` (Math, given its task as a task spec).
bench/hosted.py --openreward also hosts this module's Counter (`openreward:bench.reference_envs:Counter`).
"""

from __future__ import annotations

import argparse
from fractions import Fraction

from openreward.environments import Environment, Server, TextBlock, ToolOutput, tool
from pydantic import BaseModel


class Counter(Environment):
    def __init__(self, task_spec=None, secrets=None) -> None:
        super().__init__(task_spec or {}, secrets or {})
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


def as_number(text: str) -> Fraction | None:
    try:
        return Fraction(text.strip().replace(",", "").removeprefix("$").strip())
    except (ValueError, ZeroDivisionError):
        return None


class SubmitInput(BaseModel):
    answer: str


class Math(Environment):
    def __init__(self, task_spec=None, secrets=None) -> None:
        super().__init__(task_spec or {}, secrets or {})

    @classmethod
    def list_splits(cls):
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split):
        return [{"question": "What is 2+2?", "answer": "4"}]

    def get_prompt(self):
        return [TextBlock(text=f"{self.task_spec['question']}\n\nCall `submit` once with your final answer.")]

    @tool
    def submit(self, params: SubmitInput) -> ToolOutput:
        """Submit your final answer to the math problem. Ends the episode."""
        number = as_number(params.answer)
        correct = number is not None and number == as_number(str(self.task_spec["answer"]))
        return ToolOutput(
            blocks=[TextBlock(text="Correct!" if correct else "Wrong")], reward=float(correct), finished=True
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8080)
    Server([Math, Counter]).run(host="127.0.0.1", port=parser.parse_args().port)
