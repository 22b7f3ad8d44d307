"""What code in a hosted environment (`isolated:prober:Prober`) tries against the server and other tenants, for
tests/hosts/test_confinement.py: read a file, read another process's memory, signal a process, list /proc."""

import os
import signal

from pydantic import BaseModel

from ors_server import Environment, TextBlock, ToolOutput, tool


class PathInput(BaseModel):
    path: str


class PidInput(BaseModel):
    pid: int


def _said(text: str) -> ToolOutput:
    return ToolOutput(blocks=[TextBlock(text=text)])


class Prober(Environment):
    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{"n": 0}]

    def get_prompt(self):
        return [TextBlock(text="probe")]

    @tool
    def read(self, params: PathInput) -> ToolOutput:
        """The file's first bytes, or the error that reading it raised."""
        try:
            with open(params.path, "rb") as file:
                return _said("read: " + file.read(4096).decode("utf-8", "replace"))
        except OSError as exc:
            return _said(f"refused: {type(exc).__name__}")

    @tool
    def peek(self, params: PidInput) -> ToolOutput:
        """16 bytes of another process's memory (its first readable mapping), or the error."""
        try:
            with open(f"/proc/{params.pid}/maps") as maps:
                start = next(int(line.split("-")[0], 16) for line in maps if line.split()[1].startswith("r"))
            with open(f"/proc/{params.pid}/mem", "rb") as mem:
                mem.seek(start)
                return _said(f"read: {len(mem.read(16))} bytes")
        except (OSError, StopIteration) as exc:
            return _said(f"refused: {type(exc).__name__}")

    @tool
    def kill(self, params: PidInput) -> ToolOutput:
        """SIGKILL to the process, or the error."""
        try:
            os.kill(params.pid, signal.SIGKILL)
            return _said("killed")
        except OSError as exc:
            return _said(f"refused: {type(exc).__name__}")

    @tool
    def processes(self) -> ToolOutput:
        """The pids this process sees in /proc."""
        return _said(" ".join(sorted(entry for entry in os.listdir("/proc") if entry.isdigit())))

    @tool
    def whoami(self) -> ToolOutput:
        return _said(f"{os.getuid()} {os.getpid()}")
