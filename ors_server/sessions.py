"""Sessions: one store of live sessions and the episodes they run: ids, admission and the lifecycle.

A `Session` is what a client names: an id, an environment class, secrets, the seed and config its task came
from. It runs one `Episode` at a time: an environment instance with its state, readiness, counters and calls.
Creating a session starts its first episode; `reset` starts a new one and swaps it in; `discard` ends the
session. Every episode is built by `_start` and torn down by `_finish`, exactly once each, whoever ends it.

The `SessionStore` creates sessions (setup runs in the background), finds them (which refreshes their idle
timer), reads their environment, reaps idle ones and ends every one exactly once through `discard()`. Tool calls
are the call pipeline's (`ors_server.calls`), which runs them as tasks of the store and at the episode's gate.
Nothing here knows about HTTP, SSE or MCP.

What sessions run on is the store's `Runtime` (`ors_server.runtime`: the thread pools, background tasks, the
composed tools' catalogue, CodeAct's sandbox pool), and how an episode's environment is built, read and torn
down is `ors_server.runtime.instances`: the store decides when.

A timed-out sync tool call still running in an episode (see `ors_server.calls`) holds its episode: reads
of the prompt raise `SessionBusy` meanwhile. Resetting or deleting the session does not wait for it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc

from ors_server.environment import Environment, InvalidTaskSpec
from ors_server.episode import Episode, EpisodeEnd, EpisodeWatcher, State
from ors_server.errors import (
    CapacityReached,
    InvalidSessionId,
    InvalidTask,
    SessionBusy,
    SessionDeleted,
    SessionExists,
    SessionExpired,
    SessionNotFound,
    SessionStarting,
    ShuttingDown,
    TaskTooLarge,
    WrongEnvironment,
)
from ors_server.masking import Masker
from ors_server.runtime.instances import build, describe, read, tear_down
from ors_server.runtime.lazy_event import LazyEvent
from ors_server.runtime.resources import Runtime
from ors_server.settings import Settings
from ors_server.types import Blocks, Message

logger = logging.getLogger("ors_server.sessions")

SESSION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")

Ending = Literal["deleted", "reaped", "shutdown"]
"""How an episode ended: its session ended (`Ending`), a reset replaced it, or its setup failed."""


@dataclass(eq=False)
class Session:
    """What a client names: one environment class, its task and secrets, and the episode it runs now."""

    id: str
    env_cls: type[Environment]
    task_spec: dict[str, Any]
    secrets: dict[str, str] = field(repr=False)
    seed: int | None = None
    config: dict[str, Any] | None = None
    """Set when the task came from a seed and config (see `Environment.task_from_seed`); resets reuse it."""
    created_by: str = "ors"
    labels: dict[str, str] = field(default_factory=dict)
    """What the client that created the session said of it (`X-Episode-Labels`), kept in its episodes' records."""
    toolset: str | None = None
    """The toolset the client asked for (`claude-code`, ...): its tools act on each episode's sandbox."""
    episode: Episode = field(default_factory=Episode)
    deleted: bool = False
    """Discarded: the id no longer names it, whatever its episodes are still doing."""
    _resetting: anyio.Lock | None = None
    last_active: float = field(default_factory=time.monotonic)
    running_calls: int = 0
    """Calls running in any of its episodes: the reaper spares a session while there are any but overdue ones."""
    overdue_calls: int = 0
    """Of those, calls answered `timeout` whose threads still run: they do not keep the session alive."""
    episodes: int = 1
    """Episodes not yet torn down; once deleted, the session has ended when this reaches 0."""
    ended: LazyEvent = field(default_factory=LazyEvent)
    """Set once the session has been discarded and every environment it built torn down."""
    _masker: Masker | None = field(default=None, repr=False)

    @property
    def resetting(self) -> anyio.Lock:
        """Serialises resets of this session (calls are serialised by the episode's own lock). Made by the first
        reset: a lock is ~700 bytes, and most sessions are never reset."""
        if self._resetting is None:
            self._resetting = anyio.Lock()
        return self._resetting

    @property
    def env_name(self) -> str:
        return self.env_cls.name

    @property
    def state(self) -> State:
        return State.DELETED if self.deleted else self.episode.state

    @property
    def env(self) -> Environment | None:
        return self.episode.env

    @property
    def ready(self) -> LazyEvent:
        return self.episode.ready

    @property
    def finished(self) -> bool:
        return self.episode.finished

    @property
    def truncated(self) -> bool:
        return self.episode.truncated

    @property
    def step_count(self) -> int:
        return self.episode.step_count

    @property
    def last_reward(self) -> float:
        return self.episode.last_reward

    @property
    def total_reward(self) -> float:
        return self.episode.total_reward

    @property
    def info(self) -> dict[str, Any]:
        return self.episode.info

    def touch(self) -> None:
        self.last_active = time.monotonic()

    def redact(self, text: str) -> str:
        """`text` with every secret value of this session masked (overlaps too: `ors_server.masking`), for errors
        that reach clients or logs."""
        if self._masker is None:
            self._masker = Masker(self.secrets.values())
        return self._masker(text)


def _quote(value: Any, limit: int = 200) -> str:
    """`value` as an error message may quote it back to its sender: enough to recognise, never all of a big one."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class SessionStore:
    """Every live session, keyed by id. Run it with `async with store.run():` (the app's lifespan does)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._sessions: dict[str, Session] = {}
        self._tombstones: OrderedDict[str, Ending] = OrderedDict()
        """Ids of sessions deleted or reaped lately, oldest first, and how each ended: they answer 410 rather
        than 404. At most `settings.tombstones` of them (about 150 bytes each for 32-character ids)."""
        self.runtime = Runtime(settings)
        """What sessions and calls run on: worker threads, background tasks (`spawn`), the composed tools'
        catalogue, CodeAct's sandbox pool."""
        self._closing_since: float | None = None
        self.counts: Counter[str] = Counter()
        """Sessions created, deleted, reaped, shut down and failed setups."""
        self.on_end: list[Callable[[Session, str], None]] = []
        """Called with (session, how) when a session ends: 'deleted', 'reaped' or 'shutdown'."""
        self.watchers: list[EpisodeWatcher] = []
        """Told of every episode's start and end (the call pipeline's observers: `Calls.observe`)."""
        self.on_sweep: list[Callable[[], None]] = []
        """Called at every pass of the reaper (the call pipeline forgets old calls kept for replay)."""

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._sessions

    def holds(self, session_id: str) -> str | None:
        """'live' for a live session, 'deleted' for one remembered as ended, deleted or reaped (410), else None."""
        if session_id in self._sessions:
            return "live"
        return "deleted" if session_id in self._tombstones else None

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def lose(self, session: Session, why: str) -> None:
        """End `session` because its environment can no longer run (a host process died or hung): logged, then
        discarded as a deletion is (its id answers 410)."""
        if self._sessions.get(session.id) is session:
            logger.warning("session %s (%s) ends: %s", session.id, session.env_name, session.redact(why))
            self.runtime.spawn(self.discard, session.id)

    # Lifecycle of the store.

    @asynccontextmanager
    async def run(self) -> AsyncIterator[SessionStore]:
        # The runtime outlives the sessions: its tasks are cancelled and its sandbox pool closed after shutdown.
        async with self.runtime.run() as task_group:
            task_group.start_soon(self._reap_forever)
            try:
                yield self
            finally:
                with anyio.CancelScope(shield=True):
                    await self.shutdown()

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
            for call in [c for s in self._sessions.values() for c in s.episode.calls.values()]:
                if not call.done:  # a finished call kept for replay: reading its result would unpack its JSON
                    await call.wait()
        # Tear down every session, concurrently, each exactly once.
        sessions = list(self._sessions.values())
        async with anyio.create_task_group() as task_group:
            for session in sessions:
                task_group.start_soon(self.discard, session.id, "shutdown")
        # Episodes still being built are torn down when their setup ends; wait for that, boundedly.
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
        labels: dict[str, str] | None = None,
        toolset: str | None = None,
    ) -> Session:
        """Register a session and start building its first episode in the background; returns at once."""
        self.check_id(session_id)
        if self.closing:
            raise ShuttingDown()
        if session_id in self._sessions:
            raise SessionExists()
        self._check_admission()
        self._check_size("the task spec", task_spec)
        session = Session(
            session_id,
            env_cls,
            task_spec,
            dict(secrets or {}),
            seed=seed,
            config=config,
            created_by=created_by,
            labels=dict(labels or {}),
            toolset=toolset,
        )
        self._tombstones.pop(session_id, None)
        self._sessions[session_id] = session
        self.counts["created"] += 1
        self._tell("episode_started", session, session.episode)
        self.runtime.spawn(self._start, session, session.episode)
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
        labels: dict[str, str] | None = None,
    ) -> tuple[Session, bool]:
        """Get or create: the live session `session_id` (its idle timer refreshed), or a new one of `env_cls`
        whose task is `env_cls.task_from_seed(seed, config)`; and whether it was created by this call.

        A live session of another environment raises WrongEnvironment unless `any_env`. A deleted id may be
        opened again (a new session). When two requests open the same new id at once, both get the one session.
        """
        self.check_id(session_id)
        config = config or {}
        # Refused even when the session exists (and the config would be ignored): one rule for every request.
        self._check_size("the config", config)
        session = self._live(session_id, env_cls, any_env)
        if session is not None:
            return session, False
        task_spec = await self.task_for(env_cls, seed, config)
        # No await from here on: the check and the creation are one step for every other request.
        session = self._live(session_id, env_cls, any_env)
        if session is not None:
            return session, False
        created = self.create(
            session_id, env_cls, task_spec, seed=seed, config=config, created_by=created_by, labels=labels
        )
        return created, True

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
        return await self._task_from_seed(env_cls, seed, config)

    async def _task_from_seed(self, env_cls: type[Environment], seed: int | None, config: dict[str, Any]) -> Any:
        """The task a seed and config name. Every way a face gives a task (a new session, a reset, an MCP
        re-initialize) comes here or to `create`, so `max_task_spec_bytes` holds for all of them: the config is
        checked before the environment sees it, and the task it makes (which a session keeps) after."""
        self._check_size("the config", config)
        try:
            task_spec = await self.runtime.lifecycle(env_cls.task_from_seed, seed, config)
        except Exception as exc:
            # The seed and config come from the client: whatever the environment makes of them is the client's.
            quoted = f"seed {_quote(seed)} and config {_quote(config)}"
            raise InvalidTask(f"no task for {quoted}: {_quote(describe(exc), 400)}") from None
        self._check_size("the task spec", task_spec)
        return task_spec

    def _check_admission(self) -> None:
        if self.closing:
            raise ShuttingDown()
        if len(self._sessions) >= self.settings.max_sessions:
            raise CapacityReached(self.settings.max_sessions)

    def _check_size(self, what: str, value: Any) -> None:
        # Bounds what one session holds, so that `max_sessions` bounds memory.
        limit = self.settings.max_task_spec_bytes
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode())
        if size > limit:
            raise TaskTooLarge(what, size, limit)

    def get(self, session_id: str, env_name: str | None = None) -> Session:
        """The live session `session_id`, its idle timer refreshed. `env_name` checks the path's environment."""
        session = self._sessions.get(session_id)
        if session is None:
            raise self._gone(session_id)
        if env_name is not None and session.env_name != env_name:
            raise WrongEnvironment(session.env_name, env_name)
        session.touch()
        return session

    def _gone(self, session_id: str) -> SessionNotFound | SessionDeleted:
        """What a request for `session_id`, which names no live session, is answered."""
        how = self._tombstones.get(session_id)
        if how is None:
            return SessionNotFound()
        return SessionExpired(self.settings.session_timeout) if how == "reaped" else SessionDeleted()

    async def get_ready(self, session_id: str, env_name: str | None = None) -> Session:
        """Like `get`, but waits (boundedly) for setup to finish. Raises SessionStarting, or what a failed setup
        gives (`Episode.setup_failure`)."""
        session = self.get(session_id, env_name)
        episode = session.episode
        if not episode.ready.is_set():
            with anyio.move_on_after(self.settings.ready_wait):
                # A reset meanwhile swaps in a new episode: wait for that one.
                while not session.deleted:
                    await episode.ready.wait()
                    if session.episode is episode:
                        break
                    episode = session.episode
            if session.deleted:
                raise SessionDeleted()
            if not episode.ready.is_set():
                raise SessionStarting()
        if episode.state is State.SETUP_FAILED:
            raise episode.setup_failure()
        return session

    # Building and ending episodes: every episode goes through `_start` once and `_finish` once.

    async def _start(self, session: Session, episode: Episode) -> None:
        """Build the episode (`instances.build`, on the lifecycle threads), unless it ended first; then, if it has
        ended meanwhile, tear it down (whoever ended it left that to us, so an environment is never left half-built).
        """
        try:
            await build(self.runtime, session, episode)
        except Exception as exc:
            rejected = isinstance(exc, InvalidTaskSpec)
            episode.setup_failed(session.redact(str(exc) if rejected else describe(exc)), rejected)
            self.counts["setup_failed"] += 1
            if not episode.ended:  # an episode ended while it started failed no one, and was reported ended then
                self._tell("episode_ended", session, episode, "setup_failed")
                # A task spec the environment refused is the client's mistake, not the server's: no warning.
                logger.log(
                    logging.INFO if episode.task_rejected else logging.WARNING,
                    "setup failed: %s",
                    episode.setup_error,
                    extra={"session_id": session.id, "env": session.env_name},
                )
            if episode.toolbox is not None:  # the episode cannot run: its tool servers are not kept waiting
                await episode.toolbox.close(self.settings.teardown_timeout)
        else:
            episode.set_up()
        finally:
            episode.done_building()
            if episode.ended:
                await self._finish(session, episode)

    def _end_episode(self, session: Session, episode: Episode, how: EpisodeEnd) -> bool:
        """Mark an episode ended; returns whether it is ours to tear down now (else `_start` will)."""
        built = episode.end()
        if episode.state is not State.SETUP_FAILED:  # that was its end, reported then
            self._tell("episode_ended", session, episode, how)
        return built

    async def _finish(self, session: Session, episode: Episode) -> None:
        """Tear down an ended episode's environment, exactly once, after its running call (boundedly)."""
        if not episode.begin_teardown():
            return
        with anyio.CancelScope(shield=True):
            await tear_down(self.runtime, session, episode)
        session.episodes -= 1
        if session.deleted and session.episodes == 0:
            session.ended.set()

    async def discard(self, session_id: str, how: Ending = "deleted") -> bool:
        """End a session: forget it first (so its id answers 404/410 at once), then tear down its episode.

        Returns False if there was no such session. `how` is 'deleted' or 'reaped' (both remembered as a tombstone,
        so the id answers 410: `SessionDeleted`, `SessionExpired`; a reaping is logged), or 'shutdown'. Teardown
        completes even if the caller is cancelled. An episode still being built is torn down by its builder once
        setup ends, so an environment is never left half-built; the session's `ended` event is set when every
        environment it built has been torn down.
        """
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        if how == "reaped":
            logger.info(
                "session %s (%s) reaped: no request for %.0f s (--session-timeout %g)",
                session_id,
                session.env_name,
                time.monotonic() - session.last_active,
                self.settings.session_timeout,
            )
        if how != "shutdown":
            self._remember(session_id, how)
        session.deleted = True
        self.counts[how] += 1
        episode = session.episode
        if self._end_episode(session, episode, how):
            await self._finish(session, episode)
        for listener in self.on_end:
            listener(session, how)
        return True

    def _remember(self, session_id: str, how: Ending) -> None:
        self._tombstones[session_id] = how
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
        idle = [
            s.id
            for s in self._sessions.values()
            if s.last_active < deadline and s.running_calls == s.overdue_calls  # a hung thread is not activity
        ]
        for sweep in self.on_sweep:
            sweep()
        for session_id in idle:
            await self.discard(session_id, "reaped")
        return len(idle)

    # Resetting: a new episode swapped in (Eval Protocol's reset_session, MCP re-initialize).

    async def reset(self, session: Session, seed: int | None, config: dict[str, Any] | None = None) -> None:
        """Start a new episode of the session (from `seed` if the session was seeded) and wait for its setup.

        `config` gives the session a new task config first (the session is seeded from then on). A task that
        `task_from_seed` cannot make raises InvalidTask and leaves the session as it was.
        The old episode ends at once: a call still running in it is not waited for (its result reaches its own
        caller only), and its environment is torn down when that call ends (or after `instances.TEARDOWN_LOCK_WAIT`).
        A session deleted meanwhile stays deleted.
        """
        async with session.resetting:
            if session.deleted:
                return
            config = session.config if config is None else config
            if config is not None:
                task_spec = await self._task_from_seed(session.env_cls, seed, config)
                if session.deleted:
                    return
                session.seed, session.config, session.task_spec = seed, config, task_spec
            old, new = session.episode, Episode(number=session.episode.number + 1)
            session.episode = new
            session.episodes += 1
            self._tell("episode_started", session, new)
            if self._end_episode(session, old, "reset"):
                if old.busy:
                    self.runtime.spawn(self._finish, session, old)  # after its running call, without waiting here
                else:
                    await self._finish(session, old)
            self.runtime.spawn(self._start, session, new)
            await new.ready.wait()
        session.touch()

    # Reading the environment.

    async def read_prompt(self, session: Session, episode: Episode | None = None) -> Blocks:
        """The episode's opening blocks (`get_prompt()`), read holding the episode alone (the session's current
        episode, or `episode`)."""
        blocks: Blocks = await self._read(session, "get_prompt", episode)
        return blocks

    async def read_messages(self, session: Session) -> list[Message]:
        """The episode's opening as a conversation (`get_messages()`), read holding the episode alone."""
        messages: list[Message] = await self._read(session, "get_messages")
        return messages

    async def initial_observation(self, session: Session) -> Any:
        """The episode's first observation (`initial_observation()`), read holding the episode alone."""
        return await self._read(session, "initial_observation")

    async def _read(self, session: Session, method: str, episode: Episode | None = None) -> Any:
        """Call a method of the episode's environment that says something about the episode. A session that is
        gone raises SessionDeleted, one without a built environment SessionStarting, one whose timed-out call
        still runs SessionBusy, and a method that raises (or returns the wrong thing) ReadFailed."""
        episode = episode or session.episode
        if not await episode.admit():
            raise SessionBusy()
        try:
            if session.deleted:
                raise SessionDeleted()
            env = episode.env
            if env is None or episode.ended:
                raise SessionStarting()
            return await read(self.runtime, session, env, method)
        finally:
            episode.release()

    def _tell(self, event: str, *args: Any) -> None:
        """Tell every watcher of an episode's start or end; a watcher that fails is logged, never raised."""
        for watcher in self.watchers:
            try:
                getattr(watcher, event)(*args)
            except Exception:
                logger.exception("an episode watcher failed on %s", event)
