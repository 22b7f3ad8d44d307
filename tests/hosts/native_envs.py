"""Native environments served from host processes by tests/hosts/test_isolated.py: `Fragile`
(`isolated:native_envs:Fragile`), with tools that answer, crash the host process, and hang it, and a task's own tool
(`clue`, on train task 1 only); and `Twin`, served both isolated and in process to compare the two, with everything
of the newest contract: a task's own tool, a conversation, a `@terminal` submit, group scoring and a sandbox for
toolsets (`WorkDirectory`)."""

import gc
import os
import shutil
import struct
import tempfile
import threading
import time

import anyio
from pydantic import BaseModel

from ors_server import (
    Environment,
    GroupScore,
    Message,
    TextBlock,
    ToolOutput,
    terminal,
    tool,
)
from ors_server.sandboxes.interface import CommandResult, Sandbox


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


class Pair(BaseModel):
    a: int
    b: int


class Answer(BaseModel):
    answer: str


class WorkDirectory(Sandbox):
    """A directory of the process's own `/tmp`, in which commands run with `bash -c`: an author's own sandbox (in a
    host process, the host's confinement is what isolates it)."""

    def __init__(self) -> None:
        self.workdir = tempfile.mkdtemp(prefix="twin-")

    async def _run(self, command, time_limit, stdin, cwd, max_output):
        with anyio.move_on_after(time_limit):
            done = await anyio.run_process(["bash", "-c", command], input=stdin, cwd=cwd, check=False)
            out, err = done.stdout, done.stderr
            cut = len(out) > max_output or len(err) > max_output
            return CommandResult(done.returncode, out[:max_output], err[:max_output], truncated=cut)
        return CommandResult(124, b"", b"", timed_out=True)

    async def close(self) -> None:
        await super().close()
        shutil.rmtree(self.workdir, ignore_errors=True)


class Twin(Environment):
    """Arithmetic with a hint on some tasks, a conversation, a terminal submit, group scoring and a sandbox."""

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{"question": "2 + 2", "answer": "4", "hint": "an even number"}, {"question": "3 + 4", "answer": "7"}]

    async def setup(self):
        self.box = WorkDirectory()

    async def teardown(self):
        await self.box.close()

    def toolset_sandbox(self):
        return self.box

    def get_prompt(self):
        return [TextBlock(text=f"What is {self.task_spec['question']}?")]

    def get_messages(self):
        return [
            Message(role="system", blocks=[TextBlock(text="Answer with a number.")]),
            Message(role="user", blocks=[TextBlock(text=f"What is {self.task_spec['question']}?")]),
        ]

    def list_task_tools(self):
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

    def score_group(self, candidates):
        # Sync, and a bare float for a wrong answer: both as the authoring API allows.
        if any(c.final_answer() == "boom" for c in candidates):
            raise ValueError("cannot judge 'boom'")
        return [
            GroupScore(reward=1.0, metadata={"said": c.final_answer()})
            if c.final_answer().strip() == self.task_spec["answer"]
            else 0.0
            for c in candidates
        ]
