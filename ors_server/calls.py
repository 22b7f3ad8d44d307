"""The call pipeline: every tool call, from every face and from inside CodeAct steps, runs through `Calls`.

A call is one object (`ToolCall`) with one owner, the pipeline, which takes it through these stages in order:

    resolve     find the session's tool (`runtime.session_tools`: the environment's own, a composed one, the
                episode's own, `execute_code`)
    admit       hold the episode as the tool says (`runtime.call_gate`: the calls of one tool one at a time, a
                concurrent tool's with any, an exclusive one's alone); refuse at once while a timed-out call still
                runs in the episode (`session_busy`), or when the episode ended (`session_ended`), finished
                (`episode_finished`: also a call queued behind the finishing one) or has no such tool (`not_found`)
    check       the tool checks the arguments (`input_validation`)
    run         the tool runs (`ors_server.runtime.tool.Tool`), with what the pipeline gives it (`ToolRun`): author
                code awaited, or on a tool thread when sync, with a deadline (`--tool-timeout`, `timeout`)
    bound       refuse an output past `--max-output-chars` (`output_too_large`)
    record      the episode's counters, as the tool says its output counts: step count, last and total reward,
                info, finished; an output of a call during which another call finished the episode is dropped
                (`episode_finished`: the first finished=True wins, as in `openreward`)
    publish     end the call: wake its waiters, keep it for replay by id (`call_linger`, `max_replay_chars`)
    observe     hand the finished call to every `Observer` (metrics; the episode records hang here too)

Timeouts and overdue calls are accounted here only. An async tool is cancelled at its deadline. A sync tool
cannot be stopped: its caller is answered `timeout` at the deadline (`_overdue`) while its thread runs on,
keeping its tool-thread slot and its hold on the episode until it returns; meanwhile the call counts as overdue
(`Episode.overdue`, `Session.overdue_calls`, `Calls.overdue`) and calls into that episode are refused.

The pipeline runs calls as tasks of the session store (`Runtime.spawn`), so a call survives its client
disconnecting (ORS clients re-attach by `task_id`). Sessions, episodes and their lifecycle are the store's.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import math
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from ors_server.compose.toolbox import ToolServerFailed
from ors_server.environment import PROGRESS_REPORTER, Environment, ToolDef
from ors_server.episode import Episode, EpisodeEnd, EpisodeWatcher
from ors_server.errors import ToolServerUnavailable
from ors_server.ids import call_id
from ors_server.runtime.session_tools import SessionTools
from ors_server.runtime.tool import EnvironmentLost, Overtime, Refused, Tool, ToolFailed
from ors_server.runtime.worker_threads import run_in_thread
from ors_server.sessions import Session, SessionStore
from ors_server.types import ToolOutput

if TYPE_CHECKING:
    from ors_server.compose.toolbox import Toolbox
    from ors_server.settings import Settings

logger = logging.getLogger("ors_server.calls")

Reason = Literal[
    "not_found", "input_validation", "episode_finished", "timeout", "session_busy", "session_ended", "output_too_large"
]


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


def outcome(result: CallResult) -> str:
    """'ok', 'crashed' or the `ToolRejected` reason: how metrics and logs name a call's ending."""
    if isinstance(result, ToolOutput):
        return "ok"
    return result.reason if isinstance(result, ToolRejected) else "crashed"


PACK_AFTER = 2.0
"""Seconds after its end from which a finished call kept for replay holds its result as JSON (`ToolCall.pack`)."""
MAX_PROGRESS_MESSAGE_CHARS = 1000
"""A progress message longer than this is cut (it goes to the client as is, possibly many times a second)."""


@dataclass(frozen=True)
class Progress:
    """One progress report of a running tool: `done` grows from report to report; `total` if known."""

    done: float
    total: float | None
    message: str | None


@dataclass(eq=False, slots=True)
class ToolCall:
    """One call into a session's episode, from the moment a face starts it until it is forgotten.

    Finished calls are kept for `call_linger` seconds, thousands of them at a high call rate, so a kept call is
    as few objects as can be: the garbage collector walks every one of them in each full collection (measured
    at 1,300 calls/s over 40 s: 14 full collections took 2.9 s, one of them 441 ms). So the call is its own
    event (a waiter's future is made only if someone waits before the end, and dropped then), its arguments
    and its progress listener are let go when it ends, and `PACK_AFTER` seconds after its end its result is
    kept as JSON text (`pack`: one string, which the collector does not track, where a `ToolOutput` is seven
    objects), read back when someone asks for it.
    """

    id: str
    name: str
    session: Session
    episode: Episode
    face: str | None
    """The face that made the call ('ors', 'mcp', 'openenv', ...); None from code that is not a face."""
    arguments: Any
    """What the client sent, until the call ends (observers see them then)."""
    started: float = field(default_factory=time.monotonic)
    """When the call was started (`time.monotonic()`; see `wall_clock`)."""
    step: str | None = None
    """For a tool call made from inside a CodeAct step: the id of the step's call."""
    _result: CallResult | None = None
    _packed: str | None = None
    """The result as `ToolOutput` JSON, once packed (`_result` is None then)."""
    ended_at: float = 0.0
    size: int = 0
    """The result's size as `max_replay_chars` counts it."""
    progress: Callable[[Progress], None] | None = None
    """Told of each progress report of the running tool (from the tool's thread, or the event loop), when the
    face that started the call asked for them."""
    _progress_done: float = field(default=-math.inf, init=False, repr=False)
    _json: str | None = field(default=None, init=False, repr=False)
    """The result's JSON, once a face has asked for it (`output_json`), until it is packed."""
    _waiters: list[asyncio.Future[None]] | None = field(default=None, init=False, repr=False)

    def report_progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """A report of the running tool (`Environment.report_progress`): checked, and passed on if it grows."""
        if isinstance(done, bool) or not isinstance(done, int | float) or not math.isfinite(done):
            raise ValueError(f"report_progress: done must be a finite number, not {done!r}")
        if total is not None and (isinstance(total, bool) or not isinstance(total, int | float)):
            raise ValueError(f"report_progress: total must be a number or None, not {total!r}")
        if message is not None and not isinstance(message, str):
            raise ValueError(f"report_progress: message must be a string or None, not {type(message).__name__}")
        if self.progress is None or self.done or done <= self._progress_done:
            return  # MCP: "The progress value MUST increase with each notification"
        self._progress_done = done
        text = None if message is None else message[:MAX_PROGRESS_MESSAGE_CHARS]
        self.progress(Progress(float(done), None if total is None else float(total), text))

    @property
    def result(self) -> CallResult | None:
        """What the call ended with (None while it runs)."""
        if self._packed is not None:
            self._result, self._packed = ToolOutput.model_validate_json(self._packed), None
        return self._result

    def pack(self) -> None:
        """Keep the result as JSON text from now on, if it reads back as the same wire result: a plain
        `ToolOutput` that serialises (an author's `detail` or metadata may not), not truncated (a field the wire
        does not carry), and with a finite reward (JSON has no NaN)."""
        result = self._result
        if type(result) is not ToolOutput or result.truncated or not math.isfinite(result.reward or 0.0):
            self._json = None
            return
        try:
            self._packed = self._json if self._json is not None else result.model_dump_json()
        except Exception:  # noqa: BLE001 - whatever an author's values make of serialisation: keep them as they are
            return
        self._result = self._json = None

    def output_json(self) -> str:
        """The result, a `ToolOutput`, as `model_dump_json()` makes it: serialised once, for the face that answers
        with it and for `pack`."""
        if self._packed is not None:
            return self._packed
        if self._json is None:
            result = self._result
            assert isinstance(result, ToolOutput)
            self._json = result.model_dump_json()
        return self._json

    @property
    def done(self) -> bool:
        return self._result is not None or self._packed is not None

    @property
    def duration(self) -> float:
        """Seconds from start to end (to now while it runs)."""
        return (self.ended_at or time.monotonic()) - self.started

    def end(self, result: CallResult) -> None:
        self._result = result
        self.ended_at = time.monotonic()
        self.size = _result_chars(result)
        if self._waiters is not None:
            for waiter in self._waiters:
                _wake(waiter)
            self._waiters = None

    async def wait(self) -> CallResult:
        if not self.done:
            await self._waiter()
        result = self.result
        assert result is not None
        return result

    async def wait_at_most(self, seconds: float) -> CallResult | None:
        """The result, or None if the call is still running after `seconds`. A timer rather than a cancel scope:
        every ORS call waits here (its answer is one response if the call ends quickly)."""
        if not self.done:
            woken = self._waiter()
            timer = woken.get_loop().call_later(seconds, _wake, woken)
            try:
                await woken
            finally:
                timer.cancel()
        return self.result

    def _waiter(self) -> asyncio.Future[None]:
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        elif len(self._waiters) > 8:  # a long call's stream waits once per keepalive: drop the timed-out waits
            self._waiters = [w for w in self._waiters if not w.done()]
        self._waiters.append(waiter)
        return waiter


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # a waiter cancelled or timed out is done already
        waiter.set_result(None)


def wall_clock(monotonic: float) -> float:
    """A `time.monotonic()` reading (such as `ToolCall.started`) as seconds since the epoch."""
    return time.time() - (time.monotonic() - monotonic)


class Observer(EpisodeWatcher):
    """Sees every episode start and end (from the store) and every finished call (from the pipeline).

    Register with `Calls.observe`. Every method is called on the event loop, in the path of the call or of the
    session's lifecycle: read what you need and return at once (hand slow work such as writing to a queue).
    An exception raised here is logged and dropped: an observer never fails or delays what it observes.
    """

    def call_ended(self, call: ToolCall) -> None:
        """`call` has ended: `call.result` is set, `call.arguments` is readable until this returns (the pipeline
        then lets it go), `call.started` and `call.duration` time it. Calls made from inside a CodeAct step come
        first, with `call.step` set to the step's call id; the step comes after them."""


class Throttle(Observer):
    """An observer that can fall behind: while `full`, calls wait in `room()` before they are admitted."""

    @property
    def full(self) -> bool:
        return False

    async def room(self) -> None:
        """Return once there is room again."""


def _result_chars(result: CallResult) -> int:
    """About what a finished call's result holds: its blocks' text and image data (and its metadata)."""
    if not isinstance(result, ToolOutput):
        return len(result.message)
    size = sum(len(block.text if block.type == "text" else block.data) for block in result.blocks)
    if result.metadata:
        size += len(json.dumps(result.metadata, default=str))
    return size


class Calls:
    """The call pipeline over one session store (see the module docstring for its stages)."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self.settings = store.settings
        self.overdue = 0
        """Timed-out sync tool calls whose threads still run."""
        self.running = 0
        """Tool calls started and not yet ended, over every session (a worker reports it to its fronts)."""
        self.observers: list[Observer] = []
        self.throttles: list[Throttle] = []
        """Observers that may fall behind (the episode records): a call waits for their room before it is
        admitted, so a slow database slows the callers rather than losing records (backpressure)."""
        self._replayable: deque[tuple[float, int, str]] = deque()
        """Every finished call kept for replay, oldest first: when it ended, its size and its id. Not the call
        itself, which would keep its episode, session and environment alive after the episode ended (when its
        kept calls are let go: `Episode.end`); and a tuple of these the garbage collector stops tracking."""
        self._kept_in: dict[str, weakref.ref[Episode]] = {}
        """Where each of them is kept, by id: its episode, weakly, so that an ended episode (which has let its calls go)
        is not kept alive for the linger with its session and environment. CPython hands out one such reference per
        episode, however many of its calls are kept."""
        self._unpacked: deque[ToolCall] = deque()
        """The finished calls not yet packed (`ToolCall.pack`), oldest first."""
        self.replay_chars = 0
        """Their sizes summed: kept within `max_replay_chars`."""
        self.lookup = SessionTools(store.runtime)
        """Where the pipeline finds a session's tools, and the faces list them."""
        store.on_sweep.append(self._forget_replays)  # in a lull too, not only when the next call ends

    def observe(self, observer: Observer) -> None:
        """Tell `observer` of every episode's start and end and of every finished call from now on (and, if it is a
        `Throttle`, let new calls wait for its room)."""
        self.observers.append(observer)
        self.store.watchers.append(observer)
        if isinstance(observer, Throttle):
            self.throttles.append(observer)

    # The tools a client sees.

    async def tools(self, env_cls: type[Environment], session: Session | None = None) -> list[ToolDef]:
        """The tools of `session` (or, without one, of a new session of `env_cls`), as every face lists them:
        the environment's own, those of its MCP tool servers, the episode's own, and `execute_code` when CodeAct
        is on (`runtime.session_tools`).

        Listing a composed environment's tools for the first time starts its servers to ask them (boundedly);
        raises ToolServerUnavailable if they do not answer."""
        if env_cls.mcp_servers:
            try:
                await self.store.runtime.load_catalogue(env_cls)
            except ToolServerFailed as exc:
                raise ToolServerUnavailable(str(exc)) from None
        if session is not None and (env_cls.has_task_tools() or session.toolset is not None):
            # The session's own tools are known once its setup has ended (`ors_server.toolsets.session`).
            session = await self.store.get_ready(session.id)
        return self.lookup.listed(env_cls, session)

    def has_tool(self, session: Session, name: str) -> bool:
        """Whether `name` is a tool of `session`."""
        return self.lookup.find(session, name) is not None

    # Starting, awaiting and finding calls.

    def start(
        self,
        session: Session,
        name: str,
        arguments: Any,
        *,
        face: str | None = None,
        progress: Callable[[Progress], None] | None = None,
    ) -> ToolCall:
        """Start a tool call in the background and return it (the call survives its client disconnecting).
        `progress`, if given, is told of the tool's progress reports (from any thread: hand them over safely)."""
        episode = session.episode
        call = ToolCall(call_id(), name, session, episode, face, arguments, progress=progress)
        episode.add_call(call)
        session.running_calls += 1
        self.running += 1
        session.touch()
        self.store.runtime.spawn(self._run, call)
        return call

    async def call(self, session: Session, name: str, arguments: Any, *, face: str | None = None) -> CallResult:
        """Run a tool call and return its result."""
        return await self.start(session, name, arguments, face=face).wait()

    def find(self, session: Session, call_id: str) -> ToolCall | None:
        """A call of the session's current episode, running or finished within `call_linger`."""
        self._forget_replays()  # every publish forgets too, but a lookup must not see past the linger in a lull
        found: ToolCall | None = session.episode.calls.get(call_id)
        return found

    # The stages.

    async def _run(self, call: ToolCall) -> None:
        session, episode = call.session, call.episode
        result: CallResult = ToolRejected("session_ended", f"'{call.name}' was not run: the server is shutting down.")
        tool = None if session.deleted or episode.ended else self.lookup.find(session, call.name)
        # How the call holds the episode (`runtime.call_gate`); an unknown tool's refusal waits for exclusive calls.
        shared = tool is None or not tool.exclusive
        serial = call.name if tool is not None and not (tool.concurrent or tool.exclusive) else None
        try:
            for throttle in self.throttles:
                if throttle.full:
                    await throttle.room()
            if not await episode.admit(serial, shared=shared):
                result = _busy(call.name) if episode.overdue else _ended(call.name)
            else:
                try:
                    result = await self._invoke(call, tool, self.settings.tool_timeout)
                finally:
                    episode.release(serial, shared=shared)
        finally:
            session.running_calls -= 1
            self.running -= 1
            session.touch()
            if not call.done:
                self._publish(call, result)

    async def _invoke(self, call: ToolCall, tool: Tool | None, time_limit: float | None) -> CallResult:
        """Check, run, bound and record one call of `tool` (None: the session has no tool of that name) in its
        episode, which the caller holds. `time_limit` is the tool timeout (None inside a CodeAct step, which its
        step's own timeout bounds)."""
        session, episode, name = call.session, call.episode, call.name
        if session.deleted or episode.ended:
            result: CallResult = _ended(name)
        elif episode.finished and (tool is None or not tool.runs_after_finish):
            result = _finished(name)  # queued behind the call that finished it, or come after
        elif tool is None:
            result = ToolRejected("not_found", f"'{name}' is not a valid tool")
        else:
            result = await self._attempt(call, tool, time_limit)
            if episode.finished and isinstance(result, ToolOutput) and not (tool.exclusive or tool.runs_after_finish):
                # Another call finished the episode while this one ran: the first finished=True wins.
                result = ToolRejected(
                    "episode_finished",
                    f"'{name}' ran, but another call finished the episode meanwhile: its result is dropped.",
                )
        if call.done:
            pass  # answered `timeout` already; what the overdue thread returned is dropped
        elif tool is not None and isinstance(result, ToolOutput):
            tool.record(episode, result)
        else:
            # A call refused because the episode had finished leaves "the last reward" as the finishing call set it.
            finished = isinstance(result, ToolRejected) and result.reason == "episode_finished"
            episode.record(None, keep_last_reward=finished)
        return result

    async def _attempt(self, call: ToolCall, tool: Tool, time_limit: float | None) -> CallResult:
        """Check and run the call's tool, and bound its output."""
        session, name = call.session, call.name
        try:
            checked = tool.check(call.arguments)
        except Refused as exc:
            return ToolRejected(exc.reason, session.redact(exc.message))  # type: ignore[arg-type]
        env = call.episode.env
        if env is None:
            return ToolRejected("session_ended", f"'{name}' was not run: the session has no live environment.")
        try:
            output = await tool.run(_Run(self, call, env, time_limit), checked)
        except Overtime:
            return self._timed_out(name)
        except Refused as exc:
            return ToolRejected(exc.reason, session.redact(exc.message))  # type: ignore[arg-type]
        except ToolFailed as exc:
            return ToolCrashed(session.redact(str(exc)))
        except EnvironmentLost as exc:
            # It can run no further call: the session ends (the caller gets this call's own answer).
            self.store.lose(session, exc.why)
            return self._timed_out(name) if isinstance(exc.__cause__, Overtime) else self._crashed(call, exc)
        except Exception as exc:
            return self._crashed(call, exc)
        if not isinstance(output, ToolOutput):
            shown = repr(output)
            wrong = session.redact(
                f"{type(env).__name__}.{name}() returned {type(output).__name__} "
                f"{shown[:60]}{'...' if len(shown) > 60 else ''}; it must return a ToolOutput"
            )
            logger.warning("session %s: %s", session.id, wrong, extra={"session_id": session.id})
            return ToolCrashed(wrong)
        return self._bounded(name, output)

    def _crashed(self, call: ToolCall, exc: Exception) -> ToolCrashed:
        """A tool that raised: its author sees it in the log (one warning line naming the session, the tool and the
        exception; the traceback at debug level), its caller and the record as `Type: message`."""
        session = call.session
        text = session.redact(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        logger.warning(
            "session %s: tool '%s' raised %s (the traceback is logged at --log-level debug)",
            session.id,
            session.redact(call.name),
            text,
            extra={"session_id": session.id},
        )
        if logger.isEnabledFor(logging.DEBUG):
            trace = session.redact("".join(traceback.format_exception(exc)).rstrip())
            logger.debug("session %s: traceback of tool '%s':\n%s", session.id, session.redact(call.name), trace)
        return ToolCrashed(text)

    def _bounded(self, name: str, output: ToolOutput) -> CallResult:
        """`output`, or `output_too_large` past `max_output_chars`."""
        # The limit counts characters of the blocks' content (text, and base64 image data), not of the JSON.
        size = sum(len(block.text if block.type == "text" else block.data) for block in output.blocks)
        if size > self.settings.max_output_chars:
            return ToolRejected(
                "output_too_large",
                f"'{name}' returned {size} characters, more than the limit of {self.settings.max_output_chars}",
            )
        return output

    def _timed_out(self, name: str) -> ToolRejected:
        timeout = self.settings.tool_timeout
        return ToolRejected("timeout", f"'{name}' did not finish within {timeout:g} s and was abandoned")

    async def _user_code(
        self, call: ToolCall, time_limit: float | None, function: Callable[..., Any], args: tuple[Any, ...]
    ) -> Any:
        """Run an author's `function(*args)`: async code awaited (and cancelled at the timeout), sync code on the
        tool threads. A sync tool past the timeout is answered `timeout` at once but keeps its thread, its pool
        slot and its hold on the episode until it really returns (`Episode.overdue` meanwhile). Async code past the
        timeout raises Overtime."""
        if call.progress is None:
            return await self._user_code_timed(call, time_limit, function, args)
        # The tool's own context (copied into its worker thread) carries the reporter: no state on the env.
        reporting = PROGRESS_REPORTER.set(call.report_progress)
        try:
            return await self._user_code_timed(call, time_limit, function, args)
        finally:
            PROGRESS_REPORTER.reset(reporting)

    async def _user_code_timed(
        self, call: ToolCall, time_limit: float | None, function: Callable[..., Any], args: tuple[Any, ...]
    ) -> Any:
        timeout = time_limit
        if inspect.iscoroutinefunction(function):
            if timeout is None:  # no cancel scope on the hot path
                return await function(*args)
            with anyio.move_on_after(timeout):
                return await function(*args)
            raise Overtime()
        work = functools.partial(function, *args)
        limiter = self.store.runtime.limiters["tools"]
        if timeout is None:
            # No timeout: the slot is held for as long as the call waits for the thread, which is until it returns
            # (only a cancellation at shutdown abandons it).
            output = await run_in_thread(work, limiter)
        else:
            # The slot is taken here and given back only when the thread has returned, even past the timeout, so
            # hung tools can hold at most `tool_threads` threads.
            slot = object()
            deadline = anyio.current_time() + timeout  # the timeout counts the wait for a thread too
            try:
                limiter.acquire_on_behalf_of_nowait(slot)  # the usual case: a thread is free (no cancel scope)
            except anyio.WouldBlock:
                acquired = False
                with anyio.move_on_after(timeout):
                    await limiter.acquire_on_behalf_of(slot)
                    acquired = True
                if not acquired:
                    raise Overtime() from None  # no tool thread came free in time: the tool did not run
            # A timer, not a watching task: it costs a few µs where a task group cost ~70 on every call.
            watch = asyncio.get_running_loop().call_at(deadline, self._overdue, call)
            try:
                output = await run_in_thread(work)
            finally:
                watch.cancel()
                limiter.release_on_behalf_of(slot)
            if call.done:  # answered `timeout` already: the overdue thread ending
                call.episode.overdue_ended()
                call.session.overdue_calls -= 1
                self.overdue -= 1
                logger.warning(
                    "overdue call of '%s' ended after %.1f s",
                    call.name,
                    time.monotonic() - call.started,
                    extra={"session_id": call.session.id},
                )
        if inspect.isawaitable(output):
            with anyio.move_on_after(timeout):
                return await output
            raise Overtime()
        return output

    def _overdue(self, call: ToolCall) -> None:
        """At the deadline of a sync tool still running (a timer on the event loop): answer its caller `timeout`,
        count it overdue, and refuse the calls queued behind it."""
        episode, session = call.episode, call.session
        episode.mark_overdue()  # calls queued behind it are refused (session_busy) rather than left waiting
        session.overdue_calls += 1
        self.overdue += 1
        logger.warning(
            "'%s' exceeded tool_timeout (%g s): answered 'timeout'; its thread keeps its slot and the session "
            "refuses calls until it ends",
            call.name,
            self.settings.tool_timeout,
            extra={"session_id": session.id},
        )
        self._publish(call, self._timed_out(call.name))

    async def _call_within(self, outer: ToolCall, name: str, arguments: Any) -> CallResult:
        """A call made from inside a running tool (a CodeAct step's code): it runs within the exclusive hold its
        outer call has on the episode, so it goes straight to `_invoke` (waiting at the gate behind itself would
        deadlock); it is checked, run, recorded and observed like a call from a face."""
        session = outer.session
        call = ToolCall(call_id(), name, session, outer.episode, outer.face, arguments, step=outer.id)
        result = await self._invoke(call, self.lookup.find(session, name), None)
        call.end(result)
        self._observe(call)
        return result

    # Publishing and observing.

    def _publish(self, call: ToolCall, result: CallResult) -> None:
        if isinstance(result, ToolRejected):
            # Refusals name the tool the client asked for, which may be any string (a secret value too).
            result = ToolRejected(result.reason, call.session.redact(result.message))
        call.end(result)
        if call.episode.ended:  # nothing can ask to replay it: a replay names its session's current episode
            call.episode.forget_call(call.id)
        else:
            self._replayable.append((call.ended_at, call.size, call.id))
            self._kept_in[call.id] = weakref.ref(call.episode)
            self.replay_chars += call.size
            self._forget_replays()
            self._unpacked.append(call)  # after: its waiters are yet to read its result
        self._observe(call)

    def _observe(self, call: ToolCall) -> None:
        """The one place where observers see a finished call."""
        for observer in self.observers:
            try:
                observer.call_ended(call)
            except Exception:
                logger.exception("an observer failed on a call of '%s'", call.name)
        call.arguments = call.progress = None  # a kept call holds no more than its result

    def _forget_replays(self) -> None:
        """Forget finished calls past the linger, and the oldest past the global budget (`max_replay_chars`):
        results kept for replay are bounded in total, whatever the number of sessions and clients. Pack the
        results of those that ended `PACK_AFTER` ago (whoever waited for them has read them by then)."""
        now = time.monotonic()
        unpacked = self._unpacked
        while unpacked and unpacked[0].ended_at < now - PACK_AFTER:
            call = unpacked.popleft()
            if call.episode.calls.get(call.id) is call:
                call.pack()
        horizon = now - self.settings.call_linger
        replayable = self._replayable
        while replayable and (self.replay_chars > self.settings.max_replay_chars or replayable[0][0] < horizon):
            _, size, call_id = replayable.popleft()
            self.replay_chars -= size
            episode = self._kept_in.pop(call_id)()
            if episode is not None:
                episode.forget_call(call_id)  # a waiter holding the call still gets its result


class _Run:
    """What a tool runs with (`ors_server.runtime.tool.ToolRun`): its call's episode, and the pipeline's services."""

    __slots__ = ("_calls", "_call", "env", "time_limit")

    def __init__(self, calls: Calls, call: ToolCall, env: Environment, time_limit: float | None) -> None:
        self._calls = calls
        self._call = call
        self.env = env
        self.time_limit = time_limit

    @property
    def toolbox(self) -> Toolbox | None:
        return self._call.episode.toolbox

    @property
    def settings(self) -> Settings:
        return self._calls.settings

    @property
    def session_id(self) -> str:
        return self._call.session.id

    def redact(self, text: str) -> str:
        return self._call.session.redact(text)

    async def user_code(self, function: Callable[..., Any], *args: Any) -> Any:
        return await self._calls._user_code(self._call, self.time_limit, function, args)

    async def call_tool(self, name: str, arguments: Any) -> CallResult:
        return await self._calls._call_within(self._call, name, arguments)

    def tools(self) -> Sequence[ToolDef]:
        session = self._call.session
        return self._calls.lookup.listed(session.env_cls, session)

    @contextmanager
    def until_episode_ends(self) -> Iterator[anyio.CancelScope]:
        with anyio.CancelScope() as scope, self._call.episode.running_step(scope):
            yield scope


def _busy(name: str) -> ToolRejected:
    return ToolRejected(
        "session_busy",
        f"'{name}' was not run: an earlier call in this session timed out and is still running; "
        "try again when it ends, or reset or delete the session.",
    )


def _finished(name: str) -> ToolRejected:
    return ToolRejected(
        "episode_finished",
        f"'{name}' was not run: the episode has finished (a tool returned finished=True), "
        "so no further tool calls are accepted.",
    )


def _ended(name: str) -> ToolRejected:
    return ToolRejected("session_ended", f"'{name}' was not run: the episode has ended.")


__all__ = [
    "CallResult",
    "Calls",
    "EpisodeEnd",
    "Observer",
    "Reason",
    "Throttle",
    "ToolCall",
    "ToolCrashed",
    "ToolRejected",
    "outcome",
    "wall_clock",
]
