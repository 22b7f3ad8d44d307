"""The server side of a hosted environment: an `Environment` subclass made from a host's description.

Everything of the core works on it as on a native class: the store builds one instance per episode, whose
`setup()` places it on a host process of the class's pool and creates it there, its tools and prompt are
requests to that process, its `teardown()` deletes it there. Class-level listings (tasks) are requests to any
process of the pool; the splits and tools are the description's, read once when `--env` is loaded.

A hosted tool takes its arguments as the client sent them (`HostedTool`): the framework checks them in the host,
in its own words, and its refusals are the pipeline's (`Refused`). When the host process dies, or a call is
abandoned at `--tool-timeout` (the process may hold a hung thread: it is retired), the instance is `lost`: the
call raises `EnvironmentLost`, so it fails with a clear error and the call pipeline ends the session.
"""

from __future__ import annotations

import builtins
import inspect
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
from pydantic import Field

from ors_server.environment import Environment, ToolDef
from ors_server.hosting.pool import HostPool
from ors_server.hosting.process import HostError, HostFailed, HostProcess, HostSpec
from ors_server.hosting.sandbox import HostedSandbox
from ors_server.runtime.tool import EnvironmentLost, Overtime, Refused
from ors_server.sandboxes.interface import Sandbox
from ors_server.types import GroupCandidate, GroupScore, ImageBlock, Message, Split, TextBlock, ToolOutput

if TYPE_CHECKING:
    from ors_server.runtime.tool import ToolRun

REFUSALS = ("not_found", "input_validation", "episode_finished", "output_too_large")
"""The refusals of a framework that the call pipeline reports as its own (`ToolRejected` reasons)."""


class HostLost(HostFailed, EnvironmentLost):
    """The episode's host process died, hung or broke the protocol: this instance can run nothing more."""


class HostedOutput(ToolOutput):
    """A hosted tool's output, with what its framework itself answered (`native`), for the face that speaks that
    framework's protocol (the OpenEnv face sends an OpenEnv class's own observation). Never serialised."""

    native: Any = Field(default=None, exclude=True)


@dataclass(frozen=True)
class HostedTool(ToolDef):
    """A tool whose arguments go to the host unchecked here (the framework checks them)."""

    def check(self, arguments: Any) -> Any:
        return ({} if arguments is None else arguments,)

    async def run(self, run: ToolRun, checked: Any) -> Any:
        env = run.env
        try:
            return await run.user_code(self.function, env, *checked)
        except Overtime as exc:
            # Abandoned mid-request at the deadline: its host process may hold a hung thread, and is retired.
            lost = env.lost if isinstance(env, HostedEnvironment) else None
            if lost is None:
                raise
            raise EnvironmentLost(f"'{self.name}' was abandoned at the tool timeout; the session ends", lost) from exc


def _raised(exc: HostError) -> Exception:
    """The environment's exception, as close as we can: a builtin type by name (IndexError for a task index out
    of range, which faces turn into 400), else a RuntimeError carrying its type and message."""
    kind = getattr(builtins, exc.kind, None)
    if isinstance(kind, type) and issubclass(kind, Exception) and kind is not Exception:
        try:
            return kind(str(exc))
        except TypeError:
            pass
    return RuntimeError(f"{exc.kind}: {exc}")


class HostedEnvironment(Environment):
    """Base of the classes `hosted_class` makes; not served itself."""

    spec: ClassVar[HostSpec]
    description: ClassVar[dict[str, Any]]
    pool: ClassVar[HostPool | None] = None
    """Set while a server serving the class runs (`ors_server.hosting.pools`)."""
    pool_users: ClassVar[int] = 0

    def __init__(self, task_spec: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets)
        self.key = uuid.uuid4().hex
        self.host: HostProcess | None = None
        self.lost: str | None = None
        """Why this instance cannot run any more (its host process died or hung); None while it can."""
        self.sandbox: Sandbox | None = None
        """The instance's sandbox for toolsets, in its host process (found at setup, where the class has one)."""

    @classmethod
    def _pool(cls) -> HostPool:
        if cls.pool is None:
            raise RuntimeError(f"'{cls.name}' is hosted, and no server is running its host processes")
        return cls.pool

    @classmethod
    async def _ask_any(cls, method: str, *args: Any) -> Any:
        host = await cls._pool().any()
        try:
            return await host.request("tasks", method=method, args=list(args))
        except HostError as exc:
            raise _raised(exc) from None

    # The class: splits and tools from the description, tasks from a host.

    @classmethod
    def list_splits(cls) -> list[Split]:
        return [Split.model_validate(split) for split in cls.description["splits"]]

    @classmethod
    async def list_tasks(cls, split: str) -> list[dict[str, Any]]:  # type: ignore[override]
        tasks: list[dict[str, Any]] = await cls._ask_any("list_tasks", split)
        return tasks

    @classmethod
    async def num_tasks(cls, split: str) -> int:  # type: ignore[override]
        count: int = await cls._ask_any("num_tasks", split)
        return count

    @classmethod
    async def get_task(cls, split: str, index: int) -> dict[str, Any]:  # type: ignore[override]
        task: dict[str, Any] = await cls._ask_any("get_task", split, index)
        return task

    @classmethod
    async def get_task_range(cls, split: str, start: int | None, stop: int | None) -> list[dict[str, Any]]:  # type: ignore[override]
        tasks: list[dict[str, Any]] = await cls._ask_any("get_task_range", split, start, stop)
        return tasks

    @classmethod
    async def task_from_seed(cls, seed: int | None, config: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        """As `Environment.task_from_seed`, asking the host for the counts and tasks (or the class's own
        `task_from_seed`, where the framework has one)."""
        if cls.description.get("extra", {}).get("task_from_seed"):
            task: dict[str, Any] = await cls._ask_any("task_from_seed", seed, config)
            return task
        if isinstance(config.get("task_spec"), dict):
            return dict(config["task_spec"])
        split = config.get("split") or cls.list_splits()[0].name
        index = config.get("index")
        if not isinstance(index, int):
            index = (seed or 0) % max(await cls.num_tasks(split), 1)
        return await cls.get_task(split, index)

    # One episode: an instance in a host process.

    async def setup(self) -> None:
        pool = self._pool()
        host = await pool.place()
        try:
            await host.request("create", session=self.key, task_spec=self.task_spec, secrets=self.secrets)
        except BaseException as exc:
            pool.release(host)
            if isinstance(exc, HostError):
                raise _raised(exc) from None
            raise
        self.host = host
        if self.has_toolset_sandbox():
            found = await self.request("sandbox")
            self.sandbox = None if found is None else HostedSandbox(self.request, found["workdir"])

    async def teardown(self) -> None:
        host, self.host = self.host, None
        if host is None:
            return
        try:
            if self.lost is None and host.dead is None:
                await host.request("delete", session=self.key)
        except HostError as exc:
            raise _raised(exc) from None
        finally:
            self._pool().release(host)

    async def _ask(self, op: str, **fields: Any) -> Any:
        host = self.host
        if self.lost is not None or host is None:
            why = self.lost or "the episode has no host process"
            raise HostLost(why, why)
        try:
            return await host.request(op, session=self.key, **fields)
        except HostFailed as exc:
            self.lost = str(exc)
            raise HostLost(f"{exc}; the session ends", self.lost) from None
        except HostError as exc:
            if exc.reason in REFUSALS:
                raise Refused(exc.reason or "", str(exc)) from None
            raise _raised(exc) from None
        except anyio.get_cancelled_exc_class():
            # Abandoned mid-call (the tool timeout): the host may hold a thread that never returns.
            self.lost = f"'{op}' was abandoned at the tool timeout in host process {host.number}"
            self._pool().retire(host, "a call was abandoned at the tool timeout")
            raise

    async def get_prompt(self) -> list[TextBlock | ImageBlock]:
        blocks = await self._ask("prompt")
        return [
            ImageBlock.model_validate(b) if b.get("type") == "image" else TextBlock.model_validate(b) for b in blocks
        ]

    async def initial_observation(self) -> Any:
        """The adapter's own first observation when its description says it has one (`extra.initial_observation`:
        an OpenEnv class's reset observation, as a JSON object), else the prompt's text."""
        if self.description.get("extra", {}).get("initial_observation"):
            return await self.request("initial_observation")
        value = super().initial_observation()
        return await value if inspect.isawaitable(value) else value

    async def call_tool(self, name: str, arguments: Any) -> ToolOutput:
        value = await self._ask("call", tool=name, arguments=arguments)
        return HostedOutput.model_validate(value)

    @classmethod
    def has_task_tools(cls) -> bool:
        return bool(cls.description.get("extra", {}).get("task_tools"))

    @classmethod
    def supports_score_group(cls) -> bool:
        return bool(cls.description.get("extra", {}).get("score_group"))

    async def get_messages(self) -> list[Message]:
        """The framework's own conversation where the class has one, else the prompt as one user turn."""
        if self.description.get("extra", {}).get("messages"):
            return [Message.model_validate(m) for m in await self.request("messages")]
        return [Message(role="user", blocks=list(await self.get_prompt()))]

    async def score_group(self, candidates: Sequence[GroupCandidate]) -> list[GroupScore]:
        payload = [candidate.model_dump(mode="json") for candidate in candidates]
        return [GroupScore.model_validate(score) for score in await self.request("score_group", payload)]

    @classmethod
    def has_toolset_sandbox(cls) -> bool:
        return bool(cls.description.get("extra", {}).get("sandbox"))

    def toolset_sandbox(self) -> Sandbox | None:
        return self.sandbox

    async def list_task_tools(self) -> list[ToolDef]:
        """The task's own tools, as the framework lists them (`openreward`'s `list_task_tools`)."""
        listed = await self.request("task_tools")
        return [_hosted_tool(t, self.description) for t in listed]

    async def request(self, name: str, payload: Any = None) -> Any:
        """Ask the episode's instance anything else its adapter answers by name (OpenEnv's `state`)."""
        return await self._ask("request", name=name, payload=payload)


def _hosted_tool(described: dict[str, Any], description: dict[str, Any]) -> HostedTool:
    """A tool as a host describes it (`{"name", "description", "input_schema"}`), called through the host, of a
    class so described (whose `calls_after_finish` says whether a call after `finished` reaches it)."""
    tool_name = described["name"]

    async def call(env: HostedEnvironment, arguments: Any) -> ToolOutput:
        return await env.call_tool(tool_name, arguments)

    call.__name__ = tool_name
    return HostedTool(
        tool_name,
        described.get("description") or "",
        None,
        call,
        input_schema=described.get("input_schema"),
        terminal=bool(described.get("terminal")),
        runs_after_finish=bool(description.get("calls_after_finish")),
        concurrent=bool(described.get("concurrent")),
        exclusive=bool(described.get("exclusive")),
    )


def hosted_class(spec: HostSpec, description: dict[str, Any]) -> type[HostedEnvironment]:
    """A `HostedEnvironment` subclass named and shaped as `description` says."""
    tools: dict[str, ToolDef] = {t["name"]: _hosted_tool(t, description) for t in description["tools"]}
    name = description["name"]
    attributes = {
        "name": name,
        "spec": spec,
        "description": description,
        "__doc__": description.get("description") or f"{name}, hosted ({spec.label})",
        "__module__": __name__,
    }
    cls: type[HostedEnvironment] = type(f"Hosted_{name}", (HostedEnvironment,), attributes)
    cls.tools = tools
    return cls
