"""The `shell` environment: a file-system exercise solved with a persistent bash, graded on `submit`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import anyio
from pydantic import BaseModel, Field

from ors_server import Environment, InvalidTaskSpec, TextBlock, ToolOutput, tool
from ors_server.environments.shell.confinement import (
    Bubblewrap,
    Unconfined,
    bwrap_problem,
    choose_sandbox,
    prepare_workdir,
    shell_resources,
    warn_unconfined,
)
from ors_server.environments.shell.exercises import EXERCISES, TEST, TRAIN, Workdir
from ors_server.sandboxes.bubblewrap import mount_tmpfs, optional_flags, private_dir, remove_tree
from ors_server.sandboxes.directory import BubblewrapSandbox
from ors_server.sandboxes.interface import Sandbox
from ors_server.sandboxes.persistent_shell import BashDriver

MAX_COMMAND_CHARS = 100_000
PROGRESS_AFTER = 2.0
"""Seconds a command runs before its first progress report."""
PROGRESS_EVERY = 1.5
"""Seconds between progress reports after that (at most 2 s apart, even on a busy event loop)."""


class BashInput(BaseModel):
    command: str = Field(description="A bash command line, run in the episode's persistent shell.")


class Shell(Environment):
    """A file-system exercise solved with a persistent bash; `submit` grades the working directory.

    Task spec: `id` (the exercise), optionally `command_timeout` (seconds, default 10) and `sandbox` ("bwrap";
    a task can ask for the sandbox, never turn the operator's off).
    """

    name = "shell"
    command_timeout: ClassVar[float] = 10.0
    output_cap: ClassVar[int] = 64 * 1024

    def __init__(self, task_spec: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets)
        exercise = EXERCISES.get(self.task_spec.get("id"))  # type: ignore[arg-type]
        if exercise is None:
            raise InvalidTaskSpec(f"task_spec 'id' must name an exercise, one of {sorted(EXERCISES)}")
        timeout = self.task_spec.get("command_timeout", self.command_timeout)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 600:
            raise InvalidTaskSpec(
                f"task_spec 'command_timeout' must be a number of seconds in (0, 600], got {timeout!r}"
            )
        self.sandbox = choose_sandbox(self.task_spec.get("sandbox"))
        if self.sandbox == "bwrap":
            problem = bwrap_problem()
            if problem is not None:
                raise RuntimeError(
                    f"shell sessions run in a bubblewrap sandbox, which cannot run on this server ({problem}); "
                    "the operator can install bubblewrap, or set ORS_SHELL_SANDBOX=none to allow unsandboxed shells"
                )
        else:
            warn_unconfined()
        self.exercise = exercise
        self.timeout = float(timeout)
        self.root: Path | None = None
        self.workdir: Workdir | None = None
        self.shell: BashDriver | None = None
        self.commands: BubblewrapSandbox | None = None
        """The working directory as a `Sandbox` (bubblewrap only): what toolsets act on."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        exercises = {"train": TRAIN, "test": TEST}.get(split)
        if exercises is None:
            raise ValueError(f"unknown split {split!r}; splits: {cls.list_splits()}")
        return [{"id": e.id, "instruction": e.instruction} for e in exercises]

    async def setup(self) -> None:
        # Whatever exists is on `self` before the next await, so a teardown after a cancelled setup finds it.
        await anyio.to_thread.run_sync(self._make_workdir)
        assert self.root is not None
        host_workdir = self.root / "work"
        if self.sandbox == "bwrap":
            confinement: Bubblewrap | Unconfined = Bubblewrap(host_workdir)
        else:
            confinement = Unconfined(host_workdir)
        self.workdir = Workdir(host_workdir, confinement.workdir)
        if self.sandbox == "bwrap":
            self.commands = BubblewrapSandbox(host_workdir, shell_resources(), flags=optional_flags())
        self.shell = BashDriver(confinement, timeout=self.timeout, output_cap=self.output_cap)
        await self.shell.start()

    def _make_workdir(self) -> None:
        self.root = private_dir("shell")  # named for this server: removed at a later start if it dies unclean
        workdir = self.root / "work"
        workdir.mkdir()
        if self.sandbox == "bwrap":
            mount_tmpfs(workdir, shell_resources().tmp_bytes)  # the directory's total size is bounded (root only)
        for name, content in self.exercise.files.items():
            path = workdir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        prepare_workdir(self.root, workdir)

    async def teardown(self) -> None:
        # The core runs teardown once, after setup has ended, possibly while a call is still running: closing the
        # shell ends that call (its reads see the shell gone).
        if self.shell is not None:
            await self.shell.close()
        if self.commands is not None:
            await self.commands.close()
        if self.root is not None:
            await anyio.to_thread.run_sync(remove_tree, self.root)

    def toolset_sandbox(self) -> Sandbox | None:
        # An unconfined shell (the operator's ORS_SHELL_SANDBOX=none) has no sandbox whose paths could be kept in.
        return self.commands

    def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(
                text=f"{self.exercise.instruction}\n\n"
                "You have a bash shell in a fresh working directory. Run commands with the bash tool "
                '({"command": "..."}); each call returns the exit code, stdout and stderr. The shell keeps its '
                f"state (current directory, variables) between calls, and a command may run for {self.timeout:g} s "
                "at most. When you are done, call submit to have the working directory checked; that ends the episode."
            )
        ]

    @tool
    async def bash(self, params: BashInput) -> ToolOutput:
        """Run a bash command in the episode's persistent shell; returns its exit code, stdout and stderr."""
        if "\0" in params.command:
            raise ValueError("the command must not contain NUL characters")
        if len(params.command) > MAX_COMMAND_CHARS:
            raise ValueError(f"the command is longer than {MAX_COMMAND_CHARS} characters")
        if self.shell is None:
            raise RuntimeError("the shell is not running")
        async with anyio.create_task_group() as reporting:
            reporting.start_soon(self._report_while_running)
            result = await self.shell.run(params.command)
            reporting.cancel_scope.cancel()
        return ToolOutput(
            blocks=[TextBlock(text=result.render())],
            metadata={"exit_code": result.exit_code},
            reward=0.0,
        )

    async def _report_while_running(self) -> None:
        """Progress of a long command for a caller that asked for it: the seconds it has run, and the last line
        it printed, from `PROGRESS_AFTER` seconds on, every `PROGRESS_EVERY`."""
        started = anyio.current_time()
        await anyio.sleep(PROGRESS_AFTER)
        while True:
            assert self.shell is not None
            elapsed = round(anyio.current_time() - started, 1)
            self.report_progress(elapsed, self.timeout, self.shell.last_line() or f"running for {elapsed:g} s")
            await anyio.sleep(PROGRESS_EVERY)

    @tool(exclusive=True)  # it grades what the other tools changed: after them, and alone
    async def submit(self) -> ToolOutput:
        """Have the working directory checked against the task; ends the episode."""
        if self.shell is None or self.workdir is None:
            raise RuntimeError("the shell is not running")
        # The episode ends here: stop everything it runs first, so nothing changes the directory during the check.
        await self.shell.close()
        problem = await anyio.to_thread.run_sync(self._check, self.workdir)
        text = "Correct: the task is solved." if problem is None else f"Not solved: {problem}."
        return ToolOutput(blocks=[TextBlock(text=text)], reward=1.0 if problem is None else 0.0, finished=True)

    def _check(self, workdir: Workdir) -> str | None:
        try:
            return self.exercise.check(workdir)
        except (OSError, ValueError) as exc:
            return f"the check could not read the working directory ({type(exc).__name__}: {exc})"
