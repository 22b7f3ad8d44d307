"""`math`: answer one arithmetic or short word problem with the `submit` tool.

The tasks ship with the package (`data/math.jsonl`): 70 train and 24 test problems. An answer is correct when
it is the same number as the reference, whatever its format (`42`, ` 42.0 `, `4.2e1`, `1,000`, `3/4` = `0.75`), given
as a JSON string or a JSON number (`{"answer": 21}` and `{"answer": "21"}` are the same answer).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction
from importlib.resources import files
from typing import Any

from pydantic import BaseModel, Field, StrictFloat, StrictInt, StrictStr

from ors_server import (
    Environment,
    GroupCandidate,
    GroupScore,
    InvalidTaskSpec,
    Split,
    TextBlock,
    ToolOutput,
    terminal,
    tool,
)


def _load() -> dict[str, list[dict[str, Any]]]:
    tasks: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for line in files("ors_server.environments").joinpath("data/math.jsonl").read_text().splitlines():
        row = json.loads(line)
        tasks[row.pop("split")].append(row)
    return tasks


TASKS = _load()


def as_number(text: str) -> Fraction | None:
    cleaned = text.strip().replace(",", "").removeprefix("$").strip()
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def same_answer(given: str, expected: str) -> bool:
    number = as_number(given)
    if number is not None:
        return number == as_number(expected)
    return " ".join(given.split()).casefold() == " ".join(expected.split()).casefold()


class SubmitInput(BaseModel):
    # Strict members: a JSON number stays a number and `true` is no answer (lax int would read it as 1).
    answer: StrictStr | StrictInt | StrictFloat = Field(
        description='Your final answer: a number (42, 0.75) or a string ("42", "3/4", "1,000")'
    )


class Math(Environment):
    name = "math"

    @classmethod
    def list_splits(cls) -> list[str | Split]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return TASKS[split]

    # These are quick and never block: `async def` runs them on the event loop, without a thread hop each.

    async def setup(self) -> None:
        spec = self.task_spec
        if not (isinstance(spec, dict) and isinstance(spec.get("question"), str) and "answer" in spec):
            raise InvalidTaskSpec('a math task spec is {"question": str, "answer": str or number, ...}')

    async def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(
                text=f"{self.task_spec['question']}\n\n"
                "Work it out, then call the `submit` tool once with your final answer as a number."
            )
        ]

    @terminal
    @tool
    async def submit(self, params: SubmitInput) -> ToolOutput:
        """Submit your final answer to the math problem. Ends the episode."""
        # str() of a float is its shortest round-trip form ("0.1"), which `Fraction` reads exactly as written.
        correct = same_answer(str(params.answer), str(self.task_spec["answer"]))
        return ToolOutput(
            blocks=[TextBlock(text="Correct!" if correct else "Wrong")],
            reward=1.0 if correct else 0.0,
            finished=True,
        )

    async def score_group(self, candidates: Sequence[GroupCandidate]) -> list[GroupScore]:
        """Each candidate's final answer (its `submit` call, else its last message) judged as `submit` judges."""
        expected = str(self.task_spec["answer"])
        scores = []
        for candidate in candidates:
            answer = candidate.final_answer("submit")
            right = same_answer(answer, expected)
            scores.append(GroupScore(reward=1.0 if right else 0.0, metadata={"answer": answer}))
        return scores
