"""Environments for the /ui tests."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ors_server import Environment, ImageBlock, TextBlock, ToolOutput, tool

# A 2x2 PNG, red and blue.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR4nGP4zwAE/xkgFAAb8gP91pbyKwAAAABJRU5ErkJggg=="


class SayInput(BaseModel):
    text: str = Field(description="What to say back")
    loud: bool = False
    times: int = 1
    mood: Literal["calm", "glad"] = "calm"
    extra: dict[str, Any] | None = None


class Echo(Environment):
    """Says back what it is given (as text, untouched: the XSS test's payload) and shows a picture."""

    name = "echo"

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{"topic": "anything"}, {"topic": "<b>bold</b>"}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Say something about {self.task_spec['topic']}.")]

    @tool
    def say(self, params: SayInput) -> ToolOutput:
        """Say it back; reward 0.5 a call."""
        text = params.text.upper() if params.loud else params.text
        said = " ".join([text] * params.times)
        return ToolOutput(blocks=[TextBlock(text=said), ImageBlock(data=PNG, mimeType="image/png")], reward=0.5)

    @tool
    def stop(self) -> ToolOutput:
        """End the episode."""
        return ToolOutput(blocks=[TextBlock(text="bye")], reward=0.0, finished=True)
