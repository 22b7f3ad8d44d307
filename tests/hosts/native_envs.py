"""A native environment served from host processes (`isolated:native_envs:Fragile`) by tests/hosts/test_isolated.py:
tools that answer, crash the host process, and hang it."""

import os
import threading
import time

from pydantic import BaseModel

from ors_server import Environment, TextBlock, ToolOutput, tool


class EchoInput(BaseModel):
    text: str


MEETING = threading.Barrier(8)
"""Shared by the sessions of one host process: `meet` returns only when eight calls run at once."""


class Fragile(Environment):
    @classmethod
    def list_splits(cls):
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split):
        return [{"n": n, "split": split} for n in range(3 if split == "train" else 2)]

    def get_prompt(self):
        return [TextBlock(text=f"task {self.task_spec['n']}")]

    @tool
    def echo(self, params: EchoInput) -> ToolOutput:
        """Say it back."""
        return ToolOutput(blocks=[TextBlock(text=f"{params.text} from {os.getpid()}")], reward=0.5)

    @tool
    def whoami(self) -> ToolOutput:
        """The host process's uid."""
        return ToolOutput(blocks=[TextBlock(text=str(os.getuid()))])

    @tool
    def meet(self) -> ToolOutput:
        """Wait until eight sessions of this host process call this at once (bounded)."""
        MEETING.wait(timeout=30)
        return ToolOutput(blocks=[TextBlock(text="met")])

    @tool
    def crash(self) -> ToolOutput:
        """Kill the host process."""
        os._exit(3)

    @tool
    def hang(self) -> ToolOutput:
        """Never return."""
        while True:
            time.sleep(3600)
