"""A native environment served from host processes (`isolated:native_envs:Fragile`) by tests/hosts/test_isolated.py:
tools that answer, crash the host process, and hang it, and a task's own tool (`clue`, on train task 1 only)."""

import gc
import os
import struct
import threading
import time

from pydantic import BaseModel

from ors_server import Environment, TextBlock, ToolOutput, tool


class EchoInput(BaseModel):
    text: str


class FloodInput(BaseModel):
    chars: int


class ClueInput(BaseModel):
    about: str


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

    def list_task_tools(self):
        return ["clue"] if self.task_spec["n"] == 1 else []

    @tool(shared=False)
    def clue(self, params: ClueInput) -> ToolOutput:
        """A clue about something, offered on task 1 only."""
        return ToolOutput(blocks=[TextBlock(text=f"{params.about}: task {self.task_spec['n']}, pid {os.getpid()}")])

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

    @tool
    def flood(self, params: FloodInput) -> ToolOutput:
        """Return `chars` characters."""
        return ToolOutput(blocks=[TextBlock(text="x" * params.chars)])

    @tool
    def forge(self) -> ToolOutput:
        """Write a reply header claiming 200 MB straight to the protocol's pipe (as agent code in a host could),
        send 1 MB of it, and hang."""
        host = next(o for o in gc.get_objects() if type(o).__name__ == "Host" and hasattr(o, "out_fd"))
        os.write(host.out_fd, struct.pack(">IQ", 200_000_000, 0) + b"x" * 1_000_000)
        while True:
            time.sleep(3600)
