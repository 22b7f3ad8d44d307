"""The recorder: an `Observer` of the call pipeline that keeps every episode, off the call path.

Observer methods only append to a queue (a list) what they must read while they are called (the call's arguments
are let go when `call_ended` returns); one writer task turns the queue into rows and writes them in batches, on a
thread of its own, within `FLUSH_DELAY` of the first item. So a call whose answer reached its client is on disk
within about a second, and a SIGKILL loses at most that.

Backpressure: the queue holds at most `--records-queue` items; past that, new tool calls wait before they are
admitted (`Calls.throttles`) until the writer has caught up, and the time they waited is counted
(`ors_records_wait_seconds_total`). Nothing is dropped silently: a batch the database refuses is tried again
(`RETRIES`), then dropped with an error in the log and `ors_records_dropped_total`.

Size: rows are counted in UTF-8 bytes and bounded as `bounds` says: `--records-call-max-bytes` each, and the room
left under `--records-max-bytes`, which the writer learns from the database whenever it prunes (every `HEARTBEAT`,
and at once when a row would not fit in its share of the room). So the records hold at most `--records-max-bytes`
plus the markers of what was cut; `Database.reclaim` gives the pages of forgotten episodes back every `HEARTBEAT`.

Secrets never reach a record: every text written (arguments, outputs, errors, the task, the prompt) has the
session's secret values masked, as they appear raw and as JSON escapes them.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ors_server.calls import Throttle, ToolCall, ToolRejected, wall_clock
from ors_server.episode import Episode, EpisodeEnd, State
from ors_server.masking import Masker
from ors_server.records import bounds
from ors_server.records.bounds import Budget
from ors_server.records.db import Batch, Database, RecordsError, resolve, shown
from ors_server.sessions import Session, SessionStore
from ors_server.settings import Settings
from ors_server.types import TextBlock, ToolOutput

logger = logging.getLogger("ors_server.records")

FLUSH_DELAY = 0.2
"""Seconds the writer waits after the first queued item, to write what follows it in the same batch."""
HEARTBEAT = 10.0
"""Seconds between a writer's heartbeats (and sweeps for orphaned episodes and retention)."""
RETRIES = 5
LOW_WATER = 7 / 8
"""Pruning forgets the oldest ended episodes down to this share of `--records-max-bytes`, so that the room it
leaves lasts a while."""
PRUNE_AGAIN = 1.0
"""Seconds between prunes asked for by a row that does not fit, while the last one forgot nothing and this writer
has ended no episode since (live episodes fill the records: what they add is cut to markers until some end)."""


@dataclass(eq=False)
class _Open:
    """What the recorder keeps of an episode while calls may still end in it."""

    key: str
    secrets: dict[str, str]
    calls: int = 0
    steps: int = 0
    """The model's calls that returned a result: those of a face, not those made from inside a CodeAct step."""
    reward: float = 0.0
    """Their rewards summed (a step's reward is what its code's calls earned: what the model saw for it)."""
    _mask: Masker | None = None

    @property
    def mask(self) -> Masker:
        """Masks each secret value, raw and as JSON escapes it inside a string (made once, on the writer)."""
        if self._mask is None:
            values = list(self.secrets.values())
            self._mask = Masker(values + [_ENCODER.encode(value)[1:-1] for value in values])
        return self._mask


def episode_id(session: Session, episode: Episode) -> str:
    """The record's id: the session id for its first episode, `{session_id}:{n}` for the n-th after a reset."""
    return session.id if episode.number == 0 else f"{session.id}:{episode.number}"


class Recorder(Throttle):
    """Records every episode of one store into one database (see the module docstring)."""

    def __init__(self, settings: Settings, store: SessionStore, target: str) -> None:
        self.settings, self.store, self.target = settings, store, target
        self.db: Database | None = None
        self.owner = uuid.uuid4().hex
        self._queue: list[tuple[Any, ...]] = []
        self._open: weakref.WeakKeyDictionary[Episode, _Open] = weakref.WeakKeyDictionary()
        self._wake = anyio.Event()
        self._room: anyio.Event | None = None
        self._written = anyio.Event()
        self._limiter = anyio.CapacityLimiter(1)
        self.counts = {"written": 0, "dropped": 0, "batches": 0}
        self.room_left = math.inf
        """Bytes this writer may still record before it prunes again (its share of `--records-max-bytes` left)."""
        self._fruitless: float | None = None
        """When a prune last forgot nothing, if no episode has ended here since."""
        self._forgot = False
        """Whether episodes were forgotten since the space was last reclaimed."""
        self.waited = 0.0
        """Seconds tool calls waited for the writer to catch up (backpressure)."""
        self.closing = anyio.Event()

    # The observer: record what is needed and return.

    def episode_started(self, session: Session, episode: Episode) -> None:
        opened = _Open(uuid.uuid4().hex, session.secrets)
        self._open[episode] = opened
        self._put(
            ("start", opened, episode_id(session, episode), session, episode.number, time.time(), session.task_spec)
        )
        self.store.runtime.spawn(self._read_prompt, session, episode, opened)

    def episode_ended(self, session: Session, episode: Episode, how: EpisodeEnd) -> None:
        opened = self._open.get(episode)
        if opened is not None:
            self._put(("end", opened, time.time(), how))

    def call_ended(self, call: ToolCall) -> None:
        opened = self._open.get(call.episode)
        if opened is None:
            return
        opened.calls += 1
        result = call.result
        if call.step is None and isinstance(result, ToolOutput):
            opened.steps += 1
            opened.reward += float(result.reward or 0.0)
        counters = (opened.steps, opened.reward, call.episode.finished, opened.calls)
        self._put(("call", opened, opened.calls - 1, call, call.arguments, call.result, counters))

    def _put(self, item: tuple[Any, ...]) -> None:
        self._queue.append(item)
        if not self._wake.is_set():
            self._wake.set()

    # Backpressure (`Calls.throttles`).

    @property
    def full(self) -> bool:
        return len(self._queue) >= self.settings.records_queue

    async def room(self) -> None:
        """Wait until the queue has room (called before a call is admitted, only when it is full)."""
        started = time.monotonic()
        while self.full and self.db is not None:
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()
        self.waited += time.monotonic() - started

    # The writer.

    @asynccontextmanager
    async def run(self) -> AsyncIterator[Recorder]:
        """Open the database and write until the block ends, then write what is left."""
        self.db = await anyio.to_thread.run_sync(Database, self.target)
        await self._in_thread(self.db.register, self.owner)
        lost = await self._in_thread(self.db.mark_orphans, self.owner)
        await self._prune()
        logger.info(
            "episode records: %s%s",
            shown(self.target),
            f" ({lost} episodes of processes gone marked worker_lost)" if lost else "",
        )
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._write_forever)
                group.start_soon(self._keep_forever)
                try:
                    yield self
                finally:
                    self.closing.set()
                    group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._flush()
                await self._in_thread(self.db.retire, self.owner)
                await self._in_thread(self.db.close)

    async def _in_thread(self, function: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(function, *args, limiter=self._limiter)

    async def _write_forever(self) -> None:
        while True:
            await self._wake.wait()
            if len(self._queue) < self.settings.records_queue // 2:
                await anyio.sleep(FLUSH_DELAY)
            await self._flush()

    async def _keep_forever(self) -> None:
        """Heartbeat, orphans and retention, every `HEARTBEAT` seconds (a database hiccup is logged and tried again
        next time)."""
        assert self.db is not None
        db = self.db
        while True:
            await anyio.sleep(HEARTBEAT)
            try:
                await self._in_thread(db.heartbeat, self.owner)
                await self._in_thread(db.mark_orphans, self.owner)
                await self._prune()
                if self._forgot:
                    self._forgot = False
                    await self._in_thread(db.reclaim)
            except Exception as exc:
                logger.warning("episode records upkeep failed: %s", exc)

    async def _prune(self) -> None:
        self.room_left = await self._in_thread(self._prune_now, 0)

    def _prune_now(self, needed: int) -> float:
        """Forget what retention says to, and enough ended episodes to leave room for `needed` bytes (on the writer's
        thread); the room left under `--records-max-bytes`, shared evenly by the writers of the database."""
        assert self.db is not None
        limit = self.settings.records_max_bytes
        target = None if limit is None else min(int(limit * LOW_WATER), limit - needed)
        forgotten = self.db.prune(self.settings.records_keep_days, target)
        self._forgot = self._forgot or forgotten > 0
        self._fruitless = None if forgotten else time.monotonic()
        if limit is None:
            return math.inf
        total, writers = self.db.usage()
        return max(limit - total, 0) / max(writers, 1)

    def _refill(self, needed: int) -> float | None:
        """The room a prune leaves, asked for by a batch about to cut a row for want of room; None if the last
        prune forgot nothing less than `PRUNE_AGAIN` ago and no episode has ended here since."""
        if self._fruitless is not None and time.monotonic() - self._fruitless < PRUNE_AGAIN:
            return None
        try:
            return self._prune_now(needed)
        except Exception as exc:
            logger.warning("episode records: pruning failed: %s", exc)
            return None

    async def _flush(self) -> None:
        """Write everything queued so far, as one batch (shielded: items taken from the queue are written even if
        the writer is cancelled meanwhile, at shutdown)."""
        with anyio.CancelScope(shield=True):
            await self._write_queued()

    async def _write_queued(self) -> None:
        assert self.db is not None
        items, self._queue = self._queue, []
        self._wake = anyio.Event()
        if items:
            budget = Budget(self.settings.records_call_max_bytes, self.room_left, self._refill)
            batch = await self._in_thread(_batch, items, self.owner, budget)
            self.room_left = budget.room
            for attempt in range(RETRIES):
                try:
                    await self._in_thread(self.db.write, batch)
                    if batch.ends:
                        self._fruitless = None
                    self.counts["written"] += len(items)
                    self.counts["batches"] += 1
                    break
                except Exception as exc:
                    if attempt == RETRIES - 1:
                        self.counts["dropped"] += len(items)
                        logger.error("episode records: dropped %d items the database refused: %s", len(items), exc)
                    else:
                        await anyio.sleep(0.2 * 2**attempt)
        if self._room is not None and not self.full:
            self._room.set()
            self._room = None

    async def _read_prompt(self, session: Session, episode: Episode, opened: _Open) -> None:
        """Record the episode's prompt once its setup has ended (a failed setup has none)."""
        await episode.ready.wait()
        if episode.state is State.SETUP_FAILED or episode.ended:
            return
        try:
            blocks = await self.store.read_prompt(session, episode)
        except Exception:
            return  # the episode ended meanwhile, or its prompt cannot be read: the record has none
        self._put(("prompt", opened, [block.model_dump(exclude_none=True) for block in blocks]))


# Turning queued items into rows (on the writer's thread).


def _batch(items: list[tuple[Any, ...]], owner: str, budget: Budget) -> Batch:
    batch = Batch.empty()
    sizes: dict[str, tuple[int, int]] = {}
    for item in items:
        kind, opened = item[0], item[1]
        mask = opened.mask
        if kind == "start":
            _, _, record_id, session, number, started_at, task_spec = item
            # A label is the client's text too: a secret in it is masked like anywhere else.
            labels = {mask(key): mask(value) for key, value in session.labels.items()}
            task = _masked(task_spec, mask)
            original = bounds.size(task)
            allowed, bound = budget.allowed(original)
            if original > allowed:
                task = bounds.cut_json(task, allowed, bound)
            row = (
                opened.key,
                record_id,
                session.id,
                number,
                session.env_name,
                session.created_by,
                json.dumps(labels),
                task,
                started_at,
                owner,
            )
            taken = _row_size(row) + sum(bounds.size(k) + bounds.size(v) + bounds.ROW_BYTES for k, v in labels.items())
            budget.spend(taken)
            batch.episodes.append((*row, taken, max(original - bounds.size(task), 0)))
            batch.labels += [(opened.key, key, value) for key, value in labels.items()]
        elif kind == "call":
            _, _, n, call, arguments, result, (steps, reward, finished, count) = item
            call_row = _call_row(opened.key, n, call, arguments, result, mask, budget)
            batch.calls.append(call_row)
            taken, cut = sizes.get(opened.key, (0, 0))
            sizes[opened.key] = (taken + call_row[-2], cut + call_row[-1])
            batch.counters[opened.key] = (steps, reward, int(finished), count, *sizes[opened.key])
        elif kind == "prompt":
            prompt = _masked(item[2], mask)
            original = bounds.size(prompt)
            allowed, bound = budget.allowed(original)
            if original > allowed:
                texts = [mask(b.get("text", "")) for b in item[2] if b.get("type") == "text"]
                prompt = bounds.cut_blocks(texts, original, allowed, bound, None)
            taken = bounds.size(prompt)
            budget.spend(taken)
            batch.prompts.append((opened.key, prompt, taken, max(original - taken, 0)))
        elif kind == "end":
            batch.ends.append((opened.key, item[2], item[3]))
    return batch


def _row_size(row: tuple[Any, ...]) -> int:
    return sum(bounds.size(value) for value in row if isinstance(value, str)) + bounds.ROW_BYTES


def _call_row(
    key: str,
    n: int,
    call: ToolCall,
    arguments: Any,
    result: Any,
    mask: Masker,
    budget: Budget,
) -> tuple[Any, ...]:
    """The row of one call, cut to what `budget` allows (spent from it), ending with its bytes and the bytes it
    left out."""
    output = error = reason = None
    if isinstance(result, ToolOutput):
        kept = {"reward": result.reward, "finished": result.finished, "metadata": result.metadata}
        output = _masked({"blocks": [block.model_dump(exclude_none=True) for block in result.blocks], **kept}, mask)
    else:
        error = mask(result.message)
        reason = result.reason if isinstance(result, ToolRejected) else "crashed"
    recorded_arguments = _masked(arguments, mask)
    original = bounds.size(recorded_arguments) + bounds.size(output) + bounds.size(error)
    allowed, bound = budget.allowed(original)
    if original > allowed:
        # Arguments keep their JSON while they take at most a quarter of the row; the rest goes to the answer.
        if bounds.size(recorded_arguments) > allowed // 4:
            recorded_arguments = bounds.cut_json(recorded_arguments, allowed // 4, bound)
        room = allowed - bounds.size(recorded_arguments)
        if isinstance(result, ToolOutput):
            texts = [mask(block.text) for block in result.blocks if isinstance(block, TextBlock)]
            extra = {"reward": result.reward, "finished": result.finished, "metadata": None}
            output = bounds.cut_blocks(texts, original, room, bound, extra)
        elif error is not None:
            error = bounds.cut_text(error, room, bound)
    row = (
        key,
        n,
        call.face,
        mask(call.name),
        recorded_arguments,
        int(output is not None),
        output,
        error,
        reason,
        wall_clock(call.started),
        round((call.ended_at - call.started) * 1000, 3),
        call.step,
        call.id,
    )
    taken = _row_size(row)
    budget.spend(taken)
    kept_bytes = bounds.size(recorded_arguments) + bounds.size(output) + bounds.size(error)
    return (*row, taken, max(original - kept_bytes, 0))


_ENCODER = json.JSONEncoder(default=str, ensure_ascii=False)


def _masked(value: Any, mask: Masker) -> str:
    """`value` as JSON with every secret value masked (raw, and as JSON escapes it inside a string)."""
    return mask(_ENCODER.encode(value))


class RecordsCollector(Collector):
    """The recorder's figures for `/metrics`."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        recorder = self.recorder
        yield GaugeMetricFamily(
            "ors_records_queue", "Episode record items waiting for the writer", value=len(recorder._queue)
        )
        yield CounterMetricFamily(
            "ors_records_written", "Episode record items written to the database", value=recorder.counts["written"]
        )
        yield CounterMetricFamily(
            "ors_records_dropped",
            "Episode record items dropped after the database refused them (logged)",
            value=recorder.counts["dropped"],
        )
        yield CounterMetricFamily(
            "ors_records_wait_seconds",
            "Seconds tool calls waited for the episode records writer to catch up (backpressure)",
            value=recorder.waited,
        )


def recorder_for(settings: Settings, store: SessionStore) -> Recorder | None:
    """The recorder `--records` asks for, or None when records are off."""
    target = resolve(settings.records)
    return None if target is None else Recorder(settings, store, target)


__all__ = ["Recorder", "RecordsCollector", "RecordsError", "episode_id", "recorder_for"]
