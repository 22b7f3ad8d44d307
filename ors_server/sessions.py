"""Sessions: one store of live episodes, and the one call pipeline every face goes through.

A `Session` is one episode of one environment. The `SessionStore` creates sessions (setup runs in the
background), finds them (which refreshes their idle timer), runs tool calls in them (serialised per
session, concurrent across sessions), reaps idle ones and ends every one exactly once through `discard()`.
Nothing here knows about HTTP, SSE or MCP.
"""

from __future__ import annotations

import enum
import functools
import inspect
import logging
import re
import time
import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc
from pydantic import TypeAdapter, ValidationError

from ors_server.codeact import Limits, SandboxUnavailable, ToolCallFailed, run_step, sandbox_mode
from ors_server.codeact.tool import (
    EXECUTE_CODE_TOOL,
    codeact_wanted,
    observation,
    tool_specs,
    tool_value,
    with_execute_code,
)
from ors_server.environment import Environment, ToolDef
from ors_server.errors import (
    CapacityReached,
    InvalidSessionId,
    InvalidTask,
    ReadFailed,
    SessionDeleted,
    SessionExists,
    SessionNotFound,
    SessionStarting,
    SetupFailed,
    ShuttingDown,
    WrongEnvironment,
)
from ors_server.settings import Settings
from ors_server.types import Blocks, TextBlock, ToolOutput

logger = logging.getLogger("ors_server.sessions")

TEARDOWN_LOCK_WAIT = 2.0
LIFECYCLE_THREADS = 16
"""Worker threads for setup, reset and teardown, apart from the ones tool calls queue for."""
SESSION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_blocks = TypeAdapter(Blocks)


class State(enum.Enum):
    SETTING_UP = "setting-up"
    READY = "ready"
    SETUP_FAILED = "setup-failed"
    FINISHED = "finished"
    DELETED = "deleted"


Reason = Literal["not_found", "input_validation", "episode_finished", "timeout", "session_ended", "output_too_large"]


@dataclass(frozen=True)
class ToolRejected:
    """A call that did not produce a result, for a reason the client can act on. The tool may not have run."""

    reason: Reason
    message: str


@dataclass(frozen=True)
class ToolCrashed:
    """The tool raised, or returned something that is not a `ToolOutput`."""

    message: str


CallResult = ToolOutput | ToolRejected | ToolCrashed


@dataclass
class ToolCall:
    """One call into a session, kept after it ends so a client can re-attach to it by id."""

    id: str
    name: str
    done: anyio.Event = field(default_factory=anyio.Event)
    result: CallResult | None = None
    ended_at: float | None = None

    async def wait(self) -> CallResult:
        await self.done.wait()
        assert self.result is not None
        return self.result


@dataclass
class Session:
    """One episode: the environment instance plus everything the framework tracks about it."""

    id: str
    env_cls: type[Environment]
    task_spec: dict[str, Any]
    secrets: dict[str, str] = field(repr=False)
    seed: int | None = None
    config: dict[str, Any] | None = None
    """Set when the task came from a seed and config (see `Environment.task_from_seed`); resets reuse it."""
    created_by: str = "ors"
    env: Environment | None = None
    state: State = State.SETTING_UP
    setup_error: str | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)
    lock: anyio.Lock = field(default_factory=lambda: anyio.Lock(fast_acquire=True))  # no checkpoint when free
    last_active: float = field(default_factory=time.monotonic)
    running_calls: int = 0
    step_count: int = 0
    last_reward: float = 0.0
    total_reward: float = 0.0
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    calls: dict[str, ToolCall] = field(default_factory=dict)
    ended_calls: deque[tuple[float, str]] = field(default_factory=deque)
    """(end time, id) of finished calls, oldest first: what replay-by-id forgets after the linger."""
    built: bool = False
    """Construction and setup have ended (either way); until then the setup task owns the environment."""
    ended: anyio.Event = field(default_factory=anyio.Event)
    """Set once the session has been discarded and its environment torn down."""

    @property
    def env_name(self) -> str:
        return self.env_cls.name

    @property
    def finished(self) -> bool:
        return self.state is State.FINISHED

    def touch(self) -> None:
        self.last_active = time.monotonic()

    def redact(self, text: str) -> str:
        """`text` with every secret value of this session masked, for errors that reach clients or logs."""
        for value in self.secrets.values():
            if value:
                text = text.replace(value, "***")
        return text


async def run_user_code(function: Callable[..., Any], *args: Any, limiter: anyio.CapacityLimiter | None = None) -> Any:
    """Await async user code; run sync user code in a worker thread so it never blocks the event loop."""
    if inspect.iscoroutinefunction(function):
        return await function(*args)
    call = functools.partial(function, *args)
    result = await anyio.to_thread.run_sync(call, abandon_on_cancel=True, limiter=limiter)
    if inspect.isawaitable(result):
        result = await result
    return result


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _build_sync(session: Session, reseed: bool) -> None:
    if reseed:
        assert session.config is not None
        session.task_spec = session.env_cls.task_from_seed(session.seed, session.config)
    session.env = session.env_cls(task_spec=session.task_spec, secrets=session.secrets)
    if not inspect.iscoroutinefunction(session.env.setup):
        session.env.setup()


def _outcome(result: CallResult) -> str:
    if isinstance(result, ToolOutput):
        return "ok"
    return result.reason if isinstance(result, ToolRejected) else "crashed"


class SessionStore:
    """Every live session, keyed by id. Run it with `async with store.run():` (the app's lifespan does)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._sessions: dict[str, Session] = {}
        self._tombstones: OrderedDict[str, float] = OrderedDict()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._lifecycle_limiter = anyio.CapacityLimiter(LIFECYCLE_THREADS)
        self._closing_since: float | None = None
        self.counts: Counter[str] = Counter()
        """Sessions created, deleted, reaped, shut down and failed setups; tool calls by outcome."""
        self.on_end: list[Callable[[Session, str], None]] = []
        """Called with (session, how) when a session ends: 'deleted', 'reaped' or 'shutdown'."""
        self.on_call: list[Callable[[Session, str, str, float], None]] = []
        """Called with (session, tool name, outcome, seconds) when a call ends; outcome is 'ok', 'crashed'
        or a `ToolRejected` reason."""

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._sessions

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    # Lifecycle of the store.

    @asynccontextmanager
    async def run(self) -> AsyncIterator[SessionStore]:
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            task_group.start_soon(self._reap_forever)
            try:
                yield self
            finally:
                with anyio.CancelScope(shield=True):
                    await self.shutdown()
                task_group.cancel_scope.cancel()
        self._task_group = None

    def stop_admitting(self) -> None:
        """Refuse new sessions from now on; the shutdown grace period counts from the first call."""
        if self._closing_since is None:
            self._closing_since = time.monotonic()

    async def shutdown(self) -> None:
        # Stop admitting: new sessions get 503 from now on (the server may have said so at SIGTERM already).
        self.stop_admitting()
        assert self._closing_since is not None
        # Drain: in-flight calls get what is left of the grace period to finish.
        with anyio.move_on_after(self._closing_since + self.settings.shutdown_grace - time.monotonic()):
            for call in [c for s in self._sessions.values() for c in s.calls.values()]:
                await call.done.wait()
        # Tear down every session, concurrently, each exactly once.
        sessions = list(self._sessions.values())
        async with anyio.create_task_group() as task_group:
            for session in sessions:
                task_group.start_soon(self.discard, session.id, "shutdown")
        # Sessions still setting up are torn down when their setup ends; wait for that, boundedly.
        with anyio.move_on_after(self.settings.teardown_timeout):
            for session in sessions:
                await session.ended.wait()

    @property
    def closing(self) -> bool:
        return self._closing_since is not None

    # Creating and finding sessions.

    def check_id(self, session_id: str) -> str:
        if not SESSION_ID.fullmatch(session_id):
            raise InvalidSessionId("session id must be 1-128 characters of letters, digits, '_', '.', ':' or '-'")
        return session_id

    def create(
        self,
        session_id: str,
        env_cls: type[Environment],
        task_spec: dict[str, Any],
        secrets: dict[str, str] | None = None,
        *,
        seed: int | None = None,
        config: dict[str, Any] | None = None,
        created_by: str = "ors",
    ) -> Session:
        """Register a session and start building its environment in the background; returns at once."""
        self.check_id(session_id)
        if self.closing:
            raise ShuttingDown()
        if session_id in self._sessions:
            raise SessionExists()
        self._check_admission()
        session = Session(
            session_id, env_cls, task_spec, dict(secrets or {}), seed=seed, config=config, created_by=created_by
        )
        self._tombstones.pop(session_id, None)
        self._sessions[session_id] = session
        self.counts["created"] += 1
        self._spawn(self._start, session)
        return session

    async def open(
        self,
        session_id: str,
        env_cls: type[Environment],
        *,
        seed: int | None = None,
        config: dict[str, Any] | None = None,
        created_by: str,
        any_env: bool = False,
    ) -> tuple[Session, bool]:
        """Get or create: the live session `session_id` (its idle timer refreshed), or a new one of `env_cls`
        whose task is `env_cls.task_from_seed(seed, config)`; and whether it was created by this call.

        A live session of another environment raises WrongEnvironment unless `any_env`. A deleted id may be
        opened again (a new episode). When two requests open the same new id at once, both get the one session.
        """
        self.check_id(session_id)
        session = self._live(session_id, env_cls, any_env)
        if session is not None:
            return session, False
        task_spec = await self.task_for(env_cls, seed, config or {})
        # No await from here on: the check and the creation are one step for every other request.
        session = self._live(session_id, env_cls, any_env)
        if session is not None:
            return session, False
        config = config or {}
        return self.create(session_id, env_cls, task_spec, seed=seed, config=config, created_by=created_by), True

    def _live(self, session_id: str, env_cls: type[Environment], any_env: bool) -> Session | None:
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if not any_env and session.env_cls is not env_cls:
            raise WrongEnvironment(session.env_name, env_cls.name)
        session.touch()
        return session

    async def task_for(self, env_cls: type[Environment], seed: int | None, config: dict[str, Any]) -> dict[str, Any]:
        """The task of a new session named by a seed and config; raises what `create` would raise if the store
        cannot admit a session now, before spending a worker thread on `task_from_seed`."""
        self._check_admission()
        try:
            return await run_user_code(env_cls.task_from_seed, seed, config, limiter=self._lifecycle_limiter)
        except Exception as exc:
            # The seed and config come from the client: whatever the environment makes of them is the client's.
            raise InvalidTask(f"no task for seed {seed!r} and config {config!r}: {_describe(exc)}") from None

    def _check_admission(self) -> None:
        if self.closing:
            raise ShuttingDown()
        if len(self._sessions) >= self.settings.max_sessions:
            raise CapacityReached(self.settings.max_sessions)

    def get(self, session_id: str, env_name: str | None = None) -> Session:
        """The live session `session_id`, its idle timer refreshed. `env_name` checks the path's environment."""
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionDeleted() if self._is_tombstoned(session_id) else SessionNotFound()
        if env_name is not None and session.env_name != env_name:
            raise WrongEnvironment(session.env_name, env_name)
        session.touch()
        return session

    async def get_ready(self, session_id: str, env_name: str | None = None) -> Session:
        """Like `get`, but waits (boundedly) for setup to finish. Raises SessionStarting or SetupFailed."""
        session = self.get(session_id, env_name)
        if not session.ready.is_set():
            with anyio.move_on_after(self.settings.ready_wait):
                await session.ready.wait()
            if session.state is State.DELETED:
                raise SessionDeleted()
            if not session.ready.is_set():
                raise SessionStarting()
        if session.state is State.SETUP_FAILED:
            raise SetupFailed(session.setup_error or "setup failed")
        return session

    def _is_tombstoned(self, session_id: str) -> bool:
        return session_id in self._tombstones

    def _spawn(self, function: Callable[..., Any], *args: Any) -> None:
        if self._task_group is None:
            raise RuntimeError("the session store is not running: use `async with store.run():`")
        self._task_group.start_soon(function, *args)

    async def _start(self, session: Session) -> None:
        try:
            await self._build(session)
        finally:
            # Discarded while setting up: discard() left the teardown to us, so it runs after setup ends.
            if session.state is State.DELETED:
                with anyio.CancelScope(shield=True):
                    await self._teardown(session)
                session.ended.set()

    async def _build(self, session: Session, reseed: bool = False) -> None:
        """Construct the environment and run its setup; records the outcome on the session.

        The synchronous parts take one worker-thread hop, on a limiter of their own, so building an episode
        never queues behind other sessions' tool calls.
        """
        try:
            await anyio.to_thread.run_sync(
                _build_sync, session, reseed, abandon_on_cancel=True, limiter=self._lifecycle_limiter
            )
            assert session.env is not None
            if inspect.iscoroutinefunction(session.env.setup):
                await session.env.setup()
        except Exception as exc:
            session.state = State.SETUP_FAILED
            session.setup_error = session.redact(_describe(exc))
            self.counts["setup_failed"] += 1
            logger.warning("setup failed", extra={"session_id": session.id, "env": session.env_name})
        else:
            if session.state is State.SETTING_UP:
                session.state = State.READY
        finally:
            session.built = True
            session.ready.set()

    # Ending sessions.

    async def discard(self, session_id: str, how: str = "deleted") -> bool:
        """End a session: forget it first (so its id answers 404/410 at once), then tear it down.

        Returns False if there was no such session. `how` is 'deleted' (remembered as a tombstone: 410),
        'reaped' or 'shutdown'. Teardown completes even if the caller is cancelled. A session still setting up
        is torn down by its setup task once setup ends, so an environment is never left half-built.
        """
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        if how == "deleted":
            self._remember_deleted(session_id)
        session.state = State.DELETED
        self.counts[how] += 1
        session.ready.set()  # wake requests waiting for setup: they now see the session is gone
        if session.built:
            with anyio.CancelScope(shield=True):
                # Give a running call a moment to finish; a hung one must not hold the delete, and teardown
                # is what stops it (a sandbox kills its processes).
                with anyio.move_on_after(TEARDOWN_LOCK_WAIT):
                    async with session.lock:
                        pass
                await self._teardown(session)
            session.ended.set()
        for listener in self.on_end:
            listener(session, how)
        return True

    async def _teardown(self, session: Session) -> None:
        """Tear down the session's current environment, if it has one; each environment exactly once."""
        env, session.env = session.env, None
        if env is None:
            return
        try:
            with anyio.fail_after(self.settings.teardown_timeout):
                await run_user_code(env.teardown, limiter=self._lifecycle_limiter)
        except Exception as exc:
            logger.error("teardown failed: %s", session.redact(_describe(exc)), extra={"session_id": session.id})

    def _remember_deleted(self, session_id: str) -> None:
        self._tombstones[session_id] = time.monotonic()
        self._tombstones.move_to_end(session_id)
        while len(self._tombstones) > self.settings.tombstones:
            self._tombstones.popitem(last=False)

    async def _reap_forever(self) -> None:
        interval = min(5.0, self.settings.session_timeout / 4)
        while True:
            await anyio.sleep(interval)
            await self.reap()

    async def reap(self) -> int:
        """Discard every session idle longer than the timeout (a running call counts as activity)."""
        deadline = time.monotonic() - self.settings.session_timeout
        idle = [s.id for s in self._sessions.values() if s.last_active < deadline and not s.running_calls]
        for session in self._sessions.values():
            self._prune_calls(session)
        for session_id in idle:
            await self.discard(session_id, "reaped")
        return len(idle)

    # The tools a client sees, and the call pipeline.

    def codeact(self, session: Session) -> bool:
        """Whether `session` offers `execute_code`: its task spec's or binding config's `"codeact"`, else
        the server's `--codeact`."""
        return codeact_wanted(self.settings.codeact, session.task_spec, session.config)

    def tools(self, env_cls: type[Environment], session: Session | None = None) -> list[ToolDef]:
        """The tools of `session` (or, without one, of a new session of `env_cls`), as every face lists them:
        the environment's own, plus `execute_code` when CodeAct is on."""
        tools = list(env_cls.tools.values())
        on = self.codeact(session) if session is not None else self.settings.codeact
        return with_execute_code(tools) if on else tools

    def _tool(self, session: Session, name: str) -> ToolDef | None:
        if self.codeact(session):
            return next((t for t in self.tools(session.env_cls, session) if t.name == name), None)
        return session.env_cls.tools.get(name)

    def start_call(self, session: Session, name: str, arguments: Any) -> ToolCall:
        """Start a tool call in the background and return its handle (the call survives client disconnects)."""
        self._prune_calls(session)
        call = ToolCall(uuid.uuid4().hex, name)
        session.calls[call.id] = call
        session.running_calls += 1
        session.touch()
        self._spawn(self._run_call, session, call, arguments)
        return call

    async def call(self, session: Session, name: str, arguments: Any) -> CallResult:
        return await self.start_call(session, name, arguments).wait()

    def find_call(self, session: Session, call_id: str) -> ToolCall | None:
        self._prune_calls(session)
        return session.calls.get(call_id)

    def _prune_calls(self, session: Session) -> None:
        horizon = time.monotonic() - self.settings.call_linger
        ended = session.ended_calls
        while ended and ended[0][0] < horizon:
            session.calls.pop(ended.popleft()[1], None)

    async def _run_call(self, session: Session, call: ToolCall, arguments: Any) -> None:
        result: CallResult = ToolRejected("session_ended", f"'{call.name}' was not run: the server is shutting down.")
        started = time.monotonic()
        try:
            async with session.lock:
                result = await self._invoke(session, call.name, arguments)
                if self._tool(session, call.name) is EXECUTE_CODE_TOOL and isinstance(result, ToolOutput):
                    self._record_step(session, result)
                else:
                    self._record(session, result)
        finally:
            session.running_calls -= 1
            session.touch()
            call.result = result
            call.ended_at = time.monotonic()
            session.ended_calls.append((call.ended_at, call.id))
            call.done.set()
        self._count(session, call.name, result, call.ended_at - started)

    def _count(self, session: Session, name: str, result: CallResult, seconds: float) -> None:
        outcome = _outcome(result)
        self.counts["calls_" + outcome] += 1
        for listener in self.on_call:
            listener(session, name, outcome, seconds)

    async def _invoke(self, session: Session, name: str, arguments: Any) -> CallResult:
        if session.state is State.DELETED:
            return ToolRejected("session_ended", f"'{name}' was not run: the session has ended.")
        if session.finished:
            return ToolRejected(
                "episode_finished",
                f"'{name}' was not run: the episode has finished (a tool returned finished=True), "
                "so no further tool calls are accepted.",
            )
        tool = self._tool(session, name)
        if tool is None:
            return ToolRejected("not_found", f"'{name}' is not a valid tool")
        args: tuple[Any, ...] = ()
        if tool.input_model is not None:
            try:
                args = (tool.input_model.model_validate(arguments if arguments is not None else {}),)
            except ValidationError as exc:
                # Without the input: it may hold what the agent typed, secrets included.
                errors = exc.errors(include_url=False, include_context=False, include_input=False)
                return ToolRejected("input_validation", session.redact(f"Tool input validation error: {errors}"))
        elif arguments:
            return ToolRejected("input_validation", f"Tool input validation error: '{name}' takes no arguments")
        if session.env is None:
            return ToolRejected("session_ended", f"'{name}' was not run: the session has no live environment.")
        if tool is EXECUTE_CODE_TOOL:
            return await self._execute_code(session, args[0].code)
        timeout = self.settings.tool_timeout
        try:
            if timeout is None:
                output = await run_user_code(tool.function, session.env, *args)
            else:
                with anyio.move_on_after(timeout) as scope:
                    output = await run_user_code(tool.function, session.env, *args)
                if scope.cancelled_caught:
                    return ToolRejected("timeout", f"'{name}' did not finish within {timeout:g} s and was abandoned")
        except Exception as exc:
            return ToolCrashed(session.redact(str(exc) or type(exc).__name__))
        if not isinstance(output, ToolOutput):
            return ToolCrashed(f"tool '{name}' returned {type(output).__name__}, not a ToolOutput")
        size = sum(len(block.text if block.type == "text" else block.data) for block in output.blocks)
        if size > self.settings.max_output_chars:
            return ToolRejected(
                "output_too_large",
                f"'{name}' returned {size} characters, more than the limit of {self.settings.max_output_chars}",
            )
        return output

    async def _execute_code(self, session: Session, code: str) -> CallResult:
        """One CodeAct step. It runs inside the session lock its call holds, so the code's tool calls go
        straight into `_invoke` (taking the lock again would deadlock): each is validated, run, counted and
        recorded like a call from a face. The step's reward is the sum of theirs; it finished the episode if
        one of them did. A step that failed before any tool call succeeded is a crash (nothing to report);
        after one, its observation carries the error along with the rewards earned."""
        reward, finished, truncated, succeeded = 0.0, False, False, 0

        async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
            nonlocal reward, finished, truncated, succeeded
            if name == EXECUTE_CODE_TOOL.name:
                raise ToolCallFailed("execute_code cannot be called from inside code")
            started = time.monotonic()
            result = await self._invoke(session, name, arguments)
            self._record(session, result)
            self._count(session, name, result, time.monotonic() - started)
            if not isinstance(result, ToolOutput):
                raise ToolCallFailed(result.message)
            succeeded += 1
            reward += float(result.reward or 0.0)
            finished, truncated = finished or result.finished, truncated or result.truncated
            return tool_value(result)

        settings = self.settings
        timeout = settings.codeact_timeout
        if settings.tool_timeout is not None:
            timeout = min(timeout, settings.tool_timeout)
        limits = Limits(
            timeout=timeout,
            memory_bytes=settings.codeact_memory_bytes,
            output_chars=min(settings.codeact_output_chars, settings.max_output_chars),
        )
        tools = tool_specs(self.tools(session.env_cls, session))
        try:
            sandbox = sandbox_mode(settings.codeact_sandbox)
            step = await run_step(code, tools, call_tool, limits=limits, sandbox=sandbox)
        except (SandboxUnavailable, OSError) as exc:
            return ToolCrashed(f"execute_code could not start: {exc}")
        if step.stderr:
            logger.debug("execute_code stderr: %s", session.redact(step.stderr), extra={"session_id": session.id})
        text = session.redact(observation(step))
        if step.error is not None and not succeeded:
            return ToolCrashed(text)
        return ToolOutput(
            blocks=[TextBlock(text=text)],
            metadata={"tool_calls": step.tool_calls},
            reward=reward,
            finished=finished,
            truncated=truncated,
        )

    def _record_step(self, session: Session, step: ToolOutput) -> None:
        """Record a CodeAct step: its tool calls were counted and recorded one by one already, so the step
        only sets what a client reads as "the last reward" (their sum) and the info."""
        session.last_reward = float(step.reward or 0.0)
        session.info = dict(step.metadata or {})

    def _record(self, session: Session, result: CallResult) -> None:
        if not isinstance(result, ToolOutput):
            # A failed call earns nothing, so a client reading "the last reward" does not count one twice.
            if not (isinstance(result, ToolRejected) and result.reason == "episode_finished"):
                session.last_reward = 0.0
            return
        session.step_count += 1
        session.last_reward = float(result.reward or 0.0)
        session.total_reward += session.last_reward
        session.info = dict(result.metadata or {})
        if result.finished:
            session.state = State.FINISHED
            session.truncated = result.truncated

    # Reading the environment.

    async def read_prompt(self, session: Session) -> Blocks:
        """The episode's opening blocks (`get_prompt()`), read under the session lock."""
        blocks: Blocks = await self._read(session, "get_prompt")
        return blocks

    async def initial_observation(self, session: Session) -> Any:
        """The episode's first observation (`initial_observation()`), read under the session lock."""
        return await self._read(session, "initial_observation")

    async def _read(self, session: Session, method: str) -> Any:
        """Call a method of the session's environment that returns something about the episode. A session that
        is gone raises SessionDeleted, one without a built environment SessionStarting, and a method that raises
        (or returns the wrong thing) ReadFailed."""
        async with session.lock:
            if session.state is State.DELETED:
                raise SessionDeleted()
            env = session.env
            if env is None:
                raise SessionStarting()
            try:
                value = await run_user_code(getattr(env, method), limiter=self._lifecycle_limiter)
                if method == "get_prompt":
                    value = _blocks.validate_python(value)
            except Exception as exc:
                raise ReadFailed(session.redact(f"{method} failed: {_describe(exc)}")) from None
        return value

    # Resetting an episode in place (Eval Protocol's reset_session).

    async def reset(self, session: Session, seed: int | None) -> None:
        """Rebuild the session's episode: teardown, a new environment (from `seed` if the session was seeded),
        setup, and cleared counters. Waits for a running call first."""
        async with session.lock:
            if session.state is State.DELETED:
                return
            await self._teardown(session)
            if session.config is not None:
                session.seed = seed
                session.task_spec = await anyio.to_thread.run_sync(session.env_cls.task_from_seed, seed, session.config)
            session.env = None
            session.state = State.SETTING_UP
            session.setup_error = None
            session.ready = anyio.Event()
            session.step_count = 0
            session.last_reward = session.total_reward = 0.0
            session.truncated = False
            session.info = {}
            session.calls.clear()
            session.ended_calls.clear()
            session.built = False
            await self._build(session, reseed=session.config is not None)
            if session.state is State.DELETED:  # discarded while rebuilding: the new environment is ours to end
                await self._teardown(session)
        session.touch()
