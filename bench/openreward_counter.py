"""bench/envs.py's `Counter`, written for `openreward` (runs in its venv only): for bench/hosted.py --openreward."""

from openreward.environments import Environment, TextBlock, ToolOutput, tool


class Counter(Environment):
    def __init__(self, task_spec: dict, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets or {})
        self.count = 0

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"start": 0}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Call `tick` as often as you like.")]

    @tool
    def tick(self) -> ToolOutput:
        """Add one to the counter."""
        self.count += 1
        return ToolOutput(blocks=[TextBlock(text=str(self.count))], reward=0.0, finished=False)
