"""`Episode`: one run of a session's environment, from construction and setup to teardown, and its state.

The episode owns its state and its transitions; the session store (building and ending episodes) and the call
pipeline (admitting and recording calls) call these methods, and nothing else writes an episode's fields
(tests/test_episode.py holds the package to that):

    building    constructed, connected (its tool servers), set_up or setup_failed, then built
    calls       admit / release (its gate: `runtime.call_gate`), add_call / forget_call, record / record_step,
                running_step
    overdue     mark_overdue, overdue_ended: a timed-out call whose thread still runs refuses calls meanwhile
    ending      end (reset or discarded: no call runs in it any more), begin_teardown (once) and take_env
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from ors_server.compose.toolbox import Toolbox
from ors_server.environment import Environment, ToolDef
from ors_server.errors import SetupFailed, TaskRejected
from ors_server.runtime.call_gate import CallGate
from ors_server.runtime.lazy_event import LazyEvent
from ors_server.types import ToolOutput

if TYPE_CHECKING:
    from ors_server.calls import ToolCall
    from ors_server.sessions import Session

EpisodeEnd = Literal["deleted", "reaped", "shutdown", "reset", "setup_failed"]


class State(enum.Enum):
    SETTING_UP = "setting-up"
    READY = "ready"
    SETUP_FAILED = "setup-failed"
    FINISHED = "finished"
    DELETED = "deleted"


@dataclass(eq=False)
class Episode:
    """One run of a session's environment, from construction and setup to teardown."""

    env: Environment | None = None
    toolbox: Toolbox | None = None
    """The connections to the environment's MCP tool servers, open from before setup to after teardown."""
    state: State = State.SETTING_UP
    setup_error: str | None = None
    task_rejected: bool = False
    """Setup raised `InvalidTaskSpec`: the failure is the client's task spec (400), not the server's (500)."""
    ready: LazyEvent = field(default_factory=LazyEvent)
    """Set once setup has ended (either way), or the episode was ended before that."""
    built: bool = False
    """Construction and setup have ended; until then the store's `_start` owns the environment."""
    ended: bool = False
    """Reset or discarded: no call runs in it any more, and the store tears it down."""
    torn_down: bool = False
    gate: CallGate = field(default_factory=CallGate, repr=False)
    """Held by the calls running in the episode (and by reads of its environment), as their tools say. Small while
    nobody waits (no deque of waiters until one waits): every episode has one."""
    overdue: int = 0
    """Calls that timed out but whose thread still runs: while there are any, calls are refused (session_busy)."""
    waiting: set[anyio.CancelScope] | None = None
    """Calls queued at the gate, refused at once if a call ahead of them times out (made by the first)."""
    step: anyio.CancelScope | None = None
    """The CodeAct step running in the episode: cancelled (its sandbox killed) when the episode ends."""
    step_count: int = 0
    last_reward: float = 0.0
    total_reward: float = 0.0
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    own_tools: dict[str, ToolDef] | None = None
    """The session's tools beyond its class's shared ones (its task's and its toolset's: `toolsets.session`), found
    when setup has ended; None for a class that has none."""
    calls: dict[str, ToolCall] = field(default_factory=dict)
    """Its calls by id, running or kept for replay (the call pipeline decides how long); the store waits for them
    at shutdown."""
    number: int = 0
    """0 for a session's first episode, then 1, 2, ... for the episodes resets start."""

    @property
    def busy(self) -> bool:
        """Whether a call (or a read) holds the episode."""
        return self.gate.busy

    @property
    def finished(self) -> bool:
        return self.state is State.FINISHED

    def setup_failure(self) -> TaskRejected | SetupFailed:
        """What a request to this episode gets once its setup has failed."""
        if self.task_rejected:
            return TaskRejected(f"invalid task spec: {self.setup_error}")
        return SetupFailed(self.setup_error or "setup failed")

    # Building.

    def constructed(self, env: Environment) -> None:
        self.env = env

    def connected(self, toolbox: Toolbox) -> None:
        """Its tool servers' connections, opened before construction and closed after teardown."""
        self.toolbox = toolbox

    def found_own_tools(self, tools: dict[str, ToolDef]) -> None:
        """The session's own tools (`ors_server.toolsets.session`), found once setup has ended."""
        self.own_tools = tools

    def set_up(self) -> None:
        if self.state is State.SETTING_UP:
            self.state = State.READY

    def setup_failed(self, error: str, rejected: bool) -> None:
        """Construction or setup raised (`rejected`: `InvalidTaskSpec`, the client's task spec); `error` is masked."""
        self.state = State.SETUP_FAILED
        self.task_rejected = rejected
        self.setup_error = error

    def done_building(self) -> None:
        """Setup has ended, either way: requests waiting for it go on."""
        self.built = True
        self.ready.set()

    # Calls.

    async def admit(self, tool: str | None = None, *, shared: bool = False) -> bool:
        """Hold the episode: alone (the default: an exclusive tool, a read of the environment), or `shared` with
        other calls, and then with `tool` one at a time among its calls (a serialised tool; None: a concurrent one).
        False, at once, while a timed-out call still runs in it (also if that happens while waiting), or if the
        episode ends while waiting. Give it back with `release` and the same arguments."""
        if self.overdue:
            return False
        gate = self.gate
        if gate.try_enter(tool, not shared):  # the common case, without a cancel scope
            return True
        with anyio.CancelScope() as scope:
            if self.waiting is None:
                self.waiting = set()
            self.waiting.add(scope)
            try:
                await gate.enter(tool, not shared)
            finally:
                self.waiting.discard(scope)
        return not scope.cancelled_caught

    def release(self, tool: str | None = None, *, shared: bool = False) -> None:
        self.gate.leave(tool, not shared)

    async def quiet(self, within: float) -> None:
        """Wait, at most `within` seconds, for the calls holding the episode to end (before its teardown)."""
        if self.busy:
            with anyio.move_on_after(within):
                await self.gate.enter(None, True)
                self.gate.leave(None, True)

    def add_call(self, call: ToolCall) -> None:
        self.calls[call.id] = call

    def forget_call(self, call_id: str) -> None:
        self.calls.pop(call_id, None)

    def record(self, output: ToolOutput | None, *, keep_last_reward: bool = False) -> None:
        """A call's end: its output counts a step, its reward and info, and may finish the episode. A call that
        produced none (refused or crashed) earns nothing, so a client reading "the last reward" does not count
        one twice, unless `keep_last_reward` (a call refused because the episode had finished)."""
        if output is None:
            if not keep_last_reward:
                self.last_reward = 0.0
            return
        self.step_count += 1
        self.last_reward = float(output.reward or 0.0)
        self.total_reward += self.last_reward
        self.info = dict(output.metadata or {})
        if output.finished:
            self.state = State.FINISHED
            self.truncated = output.truncated

    def record_step(self, step: ToolOutput) -> None:
        """A CodeAct step's end: its tool calls were recorded one by one already, so the step only sets what a
        client reads as "the last reward" (their sum) and the info."""
        self.last_reward = float(step.reward or 0.0)
        self.info = dict(step.metadata or {})

    @contextmanager
    def running_step(self, scope: anyio.CancelScope) -> Iterator[None]:
        """A CodeAct step runs in the episode under `scope`, which ending the episode cancels (its sandbox killed)."""
        self.step = scope
        try:
            yield
        finally:
            self.step = None

    def mark_overdue(self) -> None:
        """A sync call passed its deadline while its thread runs on: refuse the calls queued behind it, and every
        call until it ends."""
        self.overdue += 1
        for waiter in list(self.waiting or ()):
            waiter.cancel()

    def overdue_ended(self) -> None:
        self.overdue -= 1

    # Ending.

    def end(self) -> bool:
        """Reset or discarded: wake requests waiting for its setup, kill a CodeAct step's agent code at once (not
        at the step's own timeout), cut tool servers still starting, refuse the calls queued at the gate, and let
        its finished calls go (a replay names its session's current episode, so no request can ask for them).
        Returns whether it is built, so the caller tears it down now (else `_start` will when setup ends)."""
        self.ended = True
        self.ready.set()
        if self.step is not None:
            self.step.cancel()
        if not self.built and self.toolbox is not None:
            self.toolbox.cut()
        for waiter in list(self.waiting or ()):
            waiter.cancel()
        for call_id in [call_id for call_id, call in self.calls.items() if call.done]:
            del self.calls[call_id]
        return self.built

    def begin_teardown(self) -> bool:
        """Whether the teardown is the caller's: True the first time only (an episode is torn down once)."""
        if self.torn_down:
            return False
        self.torn_down = True
        return True

    def take_env(self) -> Environment | None:
        """The environment to tear down (None if none was built): the episode lets go of it."""
        env, self.env = self.env, None
        return env


class EpisodeWatcher:
    """Told of every episode's start and end, with its session (id, environment, task spec, the face that
    created it: `Session.created_by`). Subclassed by the call pipeline's `Observer`, which sees the calls too.
    Called on the event loop: return at once."""

    def episode_started(self, session: Session, episode: Episode) -> None:
        """`episode` has started (`episode.number` 0 with its session, 1, 2, ... with each reset)."""

    def episode_ended(self, session: Session, episode: Episode, how: EpisodeEnd) -> None:
        """`episode` has ended, once, `how`: its session was deleted, reaped or shut down, a reset replaced it,
        or its setup failed. Its teardown may still be running."""
