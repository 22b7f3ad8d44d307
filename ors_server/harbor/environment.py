"""The environment a Harbor dataset is served as: one task per directory, an episode per container.

Written against the authoring API like any environment: the prompt is the task's `instruction.md`, `bash` runs a
command in the episode's persistent shell, `submit` runs the task's tests and ends the episode with their reward.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any, ClassVar

import anyio
from pydantic import BaseModel, Field

from ors_server.environment import Environment, InvalidTaskSpec, tool
from ors_server.harbor.runtime import HarborRuntime
from ors_server.harbor.tasks import HarborTask
from ors_server.sandboxes.container import Container, ContainerSandbox
from ors_server.sandboxes.interface import Sandbox
from ors_server.types import Split, TextBlock, ToolOutput

COMMAND_TIMEOUT = 180.0
"""Seconds a `bash` command may run when the call does not say (never past the task's agent time)."""
MAX_COMMAND_CHARS = 100_000
PROGRESS_AFTER = 2.0
"""Seconds a command runs before its first progress report."""
PROGRESS_EVERY = 1.5
"""Seconds between progress reports after that."""
TEST_OUTPUT_CHARS = 4000
"""Of the tests' output, the last characters shown in `submit`'s result."""
REWARD_DIR = "/logs/verifier"


class BashInput(BaseModel):
    command: str = Field(description="A bash command line, run in the episode's persistent shell in the container.")
    timeout: float | None = Field(
        default=None,
        gt=0,
        description=f"Seconds the command may run before it is stopped (default {COMMAND_TIMEOUT:g}); the shell "
        "and its state survive.",
    )


class HarborEnvironment(Environment):
    """The tasks of one Harbor dataset directory (made by `harbor_class`; see `ors_server.harbor`)."""

    root: ClassVar[Path]
    harbor_tasks: ClassVar[tuple[HarborTask, ...]] = ()
    runtime: ClassVar[HarborRuntime | None] = None
    """Set while a server serves the class (`ors_server.harbor.serving`)."""
    runtime_users: ClassVar[int] = 0

    def __init__(self, task_spec: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets)
        name = self.task_spec.get("name")
        task = next((task for task in self.harbor_tasks if task.name == name), None)
        if task is None:
            names = [task.name for task in self.harbor_tasks]
            shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
            raise InvalidTaskSpec(f"task_spec 'name' must name a task of {self.name}, one of: {shown}")
        self.task = task
        self.container: Container | None = None
        self.sandbox: ContainerSandbox | None = None
        self.deadline = math.inf

    @classmethod
    def list_splits(cls) -> list[Split]:
        return [Split(name="test", type="test")]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        if split != "test":
            raise ValueError(f"unknown split {split!r}; splits: ['test']")
        return [task.spec() for task in cls.harbor_tasks]

    async def setup(self) -> None:
        runtime = type(self).runtime
        if runtime is None:
            raise RuntimeError("the Harbor environment is not being served (no runtime)")
        self.container = await runtime.take(self.task)
        self.sandbox = ContainerSandbox(self.container)
        self.deadline = anyio.current_time() + self.task.agent_timeout

    def toolset_sandbox(self) -> Sandbox | None:
        """The episode's container, for the toolsets a client asks for (each command a fresh `podman exec`)."""
        return self.sandbox

    async def teardown(self) -> None:
        container, self.container = self.container, None
        if self.sandbox is not None:
            await self.sandbox.close()
        if container is not None:
            runtime = type(self).runtime
            if runtime is not None:
                await runtime.release(container)
            else:
                await container.remove()

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=self.task.instruction)]

    def _ready(self) -> Container:
        if self.container is None or self.container.shell is None:
            raise RuntimeError("the task's container is not running")
        return self.container

    def _time_up(self, text: str) -> ToolOutput:
        return ToolOutput(
            blocks=[TextBlock(text=f"{text}The task's time limit ({self.task.agent_timeout:g} s) is reached.")],
            metadata={"agent_timeout_sec": self.task.agent_timeout},
            reward=0.0,
            finished=True,
            truncated=True,
        )

    @tool
    async def bash(self, params: BashInput) -> ToolOutput:
        """Run a bash command in the task's container, in one shell kept for the whole episode (cd and exported
        variables persist); returns its exit code, stdout and stderr."""
        if "\0" in params.command:
            raise ValueError("the command must not contain NUL characters")
        if len(params.command) > MAX_COMMAND_CHARS:
            raise ValueError(f"the command is longer than {MAX_COMMAND_CHARS} characters")
        container = self._ready()
        shell = container.shell
        assert shell is not None
        left = self.deadline - anyio.current_time()
        if left <= 0:
            return self._time_up("")
        asked = params.timeout or COMMAND_TIMEOUT
        shell.timeout = min(asked, left)
        async with anyio.create_task_group() as reporting:
            reporting.start_soon(self._report_while_running, shell.timeout)
            result = await shell.run(params.command)
            reporting.cancel_scope.cancel()
        text = result.render()
        if anyio.current_time() >= self.deadline:
            return self._time_up(text + "\n")
        return ToolOutput(blocks=[TextBlock(text=text)], metadata={"exit_code": result.exit_code}, reward=0.0)

    async def _report_while_running(self, total: float) -> None:
        """Progress of a long command: the seconds it has run and the last line it printed."""
        started = anyio.current_time()
        await anyio.sleep(PROGRESS_AFTER)
        while True:
            shell = self.container.shell if self.container is not None else None
            elapsed = round(anyio.current_time() - started, 1)
            line = shell.last_line() if shell is not None else None
            self.report_progress(elapsed, total, line or f"running for {elapsed:g} s")
            await anyio.sleep(PROGRESS_EVERY)

    @tool(exclusive=True)  # it grades what the other tools changed: after them, and alone
    async def submit(self) -> ToolOutput:
        """Run the task's tests in the container and end the episode with their reward."""
        container = self._ready()
        task = self.task
        # The agent may have written anything anywhere: the tests and the reward's directory start empty.
        await container.exec(f"rm -rf /tests {REWARD_DIR} && mkdir -p /tests {REWARD_DIR} /logs/agent", within=60)
        await container.copy_in(task.tests_dir, "/tests")
        notes = []
        try:
            code, output = await container.exec(
                "bash /tests/test.sh", within=task.verifier_timeout, env=task.verifier_env
            )
            notes.append(f"tests exit code: {code}")
        except TimeoutError:
            code, output = None, ""
            notes.append(f"the tests did not finish within the verifier's timeout_sec ({task.verifier_timeout:g} s)")
        reward, source, extra, problem = await self._read_reward(container)
        if problem is not None:
            notes.append(problem)
        text = "\n".join([f"reward: {reward:g}", *notes])
        if output:
            text += "\n--- test output (last part) ---\n" + output[-TEST_OUTPUT_CHARS:]
        metadata = {"tests_exit_code": code, "reward_file": source, **extra}
        return ToolOutput(blocks=[TextBlock(text=text)], metadata=metadata, reward=reward, finished=True)

    @staticmethod
    async def _read_reward(container: Container) -> tuple[float, str | None, dict[str, Any], str | None]:
        """(reward, file it came from, other keys of reward.json, why there is none): reward.txt (a number) first,
        else reward.json ({"reward": x, ...}); 0.0 and an explanation when neither gives one."""
        separator = "__ors_reward_json__"
        script = (
            f"cat {REWARD_DIR}/reward.txt 2>/dev/null; echo; echo {separator}; "
            f"cat {REWARD_DIR}/reward.json 2>/dev/null; true"
        )
        _, output = await container.exec(script, within=60)
        text, _, json_text = output.partition(separator)
        text, json_text = text.strip(), json_text.strip()
        if text:
            try:
                value = float(text.split()[0])
            except ValueError:
                return 0.0, "reward.txt", {}, f"{REWARD_DIR}/reward.txt is not a number: {shlex.quote(text[:80])}"
            if math.isfinite(value):
                return value, "reward.txt", {}, None
            return 0.0, "reward.txt", {}, f"{REWARD_DIR}/reward.txt is not a finite number"
        if json_text:
            try:
                found = json.loads(json_text)
                value = float(found["reward"])
                if not math.isfinite(value):
                    raise ValueError("not finite")
            except (ValueError, KeyError, TypeError):
                return 0.0, "reward.json", {}, f'{REWARD_DIR}/reward.json has no numeric "reward"'
            extra = {key: item for key, item in found.items() if key != "reward"}
            return value, "reward.json", extra, None
        return 0.0, None, {}, f"the tests wrote no reward ({REWARD_DIR}/reward.txt or reward.json): reward 0.0"


def harbor_class(name: str, root: Path, tasks: list[HarborTask]) -> type[HarborEnvironment]:
    """A new environment class named `name` serving `tasks` (read from `root`)."""
    return type(
        f"Harbor_{name}",
        (HarborEnvironment,),
        {"name": name, "root": root, "harbor_tasks": tuple(tasks), "__module__": __name__},
    )
