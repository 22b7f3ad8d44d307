"""Reading episode records: as the REST readers and the CLI show them, and as exported (our own JSON Lines, or
Eval Protocol `EvaluationRow`s).

`Reader` is the async side the server uses (every query on a thread of its own, on a connection of its own, so
reading never waits for the writer); the CLI uses a `Database` directly.

An episode's calls are read a page at a time (at most `PAGE_BYTES` of them as recorded, so one read holds about
that plus one call of at most `--records-call-max-bytes`), and turned into JSON text on the reading thread: `GET
/episodes/{id}` answers one page and a cursor to the next, the export and `ors-server episodes show` write an
episode's JSON as its pages come. Reads of calls take turns on a connection and a thread of their own (the bulk
lane), so lists, summaries and the event streams' looks never wait behind a large episode.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio

from ors_server.records.db import CallPage, Database, loads, parse_cursor

MAX_LIMIT = 500
DEFAULT_LIMIT = 50
EXPORT_PAGE = 200
CALLS_LIMIT = 1000
"""Calls in one page of `GET /episodes/{id}` at most (`calls_limit`, also its default)."""
PAGE_BYTES = 4 * 1024 * 1024
"""Bytes of calls (as recorded) one page holds at most, unless its first call alone is larger."""
POLL = 0.3
"""Seconds between looks at a live episode's new calls (they reach the database within about that, from any
worker)."""


def iso(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


def parse_time(text: str, name: str) -> float:
    """An ISO 8601 time (UTC if it names no zone) as epoch seconds; ValueError naming `name` otherwise."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name} must be an ISO 8601 time, got {text!r}"[:200]) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass
class Filters:
    """What `GET /episodes`, the export and the CLI select episodes by."""

    env: str | None = None
    status: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    since: float | None = None
    until: float | None = None

    @classmethod
    def parse(cls, query: dict[str, str], labels: dict[str, str]) -> Filters:
        """From query parameters (`env`, `status`, `since`, `until`) and `label.KEY=VALUE` ones; ValueError
        with a message for the client if one is wrong."""
        status = query.get("status")
        if status not in (None, "live", "ended"):
            raise ValueError(f"status must be live or ended, got {status!r}"[:200])
        since = parse_time(query["since"], "since") if query.get("since") else None
        until = parse_time(query["until"], "until") if query.get("until") else None
        return cls(query.get("env"), status, labels, since, until)

    def query(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "status": self.status,
            "labels": self.labels,
            "since": self.since,
            "until": self.until,
        }


def summary(row: dict[str, Any]) -> dict[str, Any]:
    """An episode as `GET /episodes` lists it (with its task when the row has it)."""
    shown = {
        "id": row["id"],
        "session_id": row["session_id"],
        "env": row["env"],
        "status": "live" if row["ended_at"] is None else "ended",
        "face": row["face"],
        "labels": json.loads(row["labels"]),
        "started_at": iso(row["started_at"]),
        "ended_at": iso(row["ended_at"]),
        "end_reason": row["end_reason"],
        "steps": int(row["steps"]),
        "reward": float(row["reward"]),
        "finished": bool(row["finished"]),
        "truncated_bytes": int(row["truncated"]),
    }
    if "task" in row:
        shown["task"] = loads(row["task"])
    return shown


def call_of(row: dict[str, Any]) -> dict[str, Any]:
    """A call as a record shows it: `output` when it was accepted, else `error` (and why: `reason`)."""
    call: dict[str, Any] = {
        "id": row["id"],  # None in records written before calls had their ids kept
        "face": row["face"],
        "tool": row["tool"],
        "arguments": loads(row["arguments"]),
        "ok": bool(row["ok"]),
    }
    if row["ok"]:
        call["output"] = loads(row["output"])
    else:
        call["error"] = row["error"]
        call["reason"] = row["reason"]
    call["started_at"] = iso(row["started_at"])
    call["duration_ms"] = row["duration_ms"]
    if row["step"] is not None:
        call["step"] = row["step"]  # made from inside a CodeAct step: the step's call id
    if row["truncated"]:
        call["truncated_bytes"] = row["truncated"]  # its record was cut (see `records.bounds`)
    return call


def header(row: dict[str, Any]) -> dict[str, Any]:
    """An episode without its calls: its summary, task and prompt."""
    return {**summary(row), "task": loads(row["task"]), "prompt": loads(row["prompt"])}


def full(row: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """An episode with all its calls, as `jsonl` exports it (written a page at a time by `episode_text`)."""
    return {**header(row), "calls": [call_of(c) for c in calls]}


def episode_page(db: Database, row: dict[str, Any], after: int, limit: int) -> bytes:
    """`GET /episodes/{id}`: the episode with one page of its calls (those after call `after`, at most `limit`)
    and `calls_next`, the cursor to the next page (null at the last one recorded so far), as JSON bytes."""
    page = db.call_page(row["key"], after, limit, PAGE_BYTES) if limit else CallPage([], after + 1 < row["calls"])
    following = str(page.rows[-1]["n"] if page.rows else after) if page.more else None
    body = {**header(row), "calls": [call_of(c) for c in page.rows], "calls_next": following}
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _text(blocks: Any) -> str:
    """The text of content blocks (images named, not inlined)."""
    parts = []
    for block in blocks or []:
        if block.get("type") == "text":
            parts.append(block.get("text", ""))
        else:
            parts.append(f"[{block.get('type', 'block')} {block.get('mimeType', '')}]".replace(" ]", "]"))
    return "\n".join(parts)


def steps(calls: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The model's calls (those of a face), each with the calls its CodeAct code made (`step` names the step's
    `id`; they end, and are recorded, before their step)."""
    inner: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        if call.get("step") is not None:
            inner.setdefault(call["step"], []).append(call)
    return [(call, inner.get(call["id"], []) if call.get("id") else []) for call in calls if call.get("step") is None]


def _signature(call: dict[str, Any]) -> str:
    return f"{call['tool']}({json.dumps(call['arguments'] if call['arguments'] is not None else {})})"


def evaluation_row(episode: dict[str, Any]) -> dict[str, Any]:
    """An episode (`full`) as an Eval Protocol `EvaluationRow`: the prompt as the user's message, each of the model's
    calls as an assistant message with one tool call and the tool's answer, the reward as the evaluation score, and
    the ids and labels in the metadata.

    Only the model's calls are messages: the calls a CodeAct step's code made ride along in its tool message's
    `control_plane_step` (`inner_calls`), the field where Eval Protocol keeps what a step did (its reward, whether
    it terminated, its tool calls), so `EvaluationRow.get_steps()` and `get_total_reward()` count what the model
    did and earned."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": _text(episode["prompt"])}]
    model_calls = steps(episode["calls"])
    accepted = 0
    for n, (call, inner) in enumerate(model_calls):
        messages += model_messages(n, call, inner, accepted)
        accepted += bool(call["ok"])
    ids = {
        "episode_id": episode["id"],
        "session_id": episode["session_id"],
        "env": episode["env"],
        "face": episode["face"],
        "labels": episode["labels"],
    }
    return {
        "messages": messages,
        "input_metadata": {
            "row_id": episode["id"],
            "completion_params": {},
            "dataset_info": {"env": episode["env"], "task": episode["task"]},
            "session_data": ids,
        },
        "evaluation_result": {
            "score": episode["reward"],
            "is_score_valid": True,
            "reason": f"ended: {episode['end_reason']}" if episode["end_reason"] else "live",
        },
        "execution_metadata": {
            "rollout_id": episode["id"],
            "tool_call_count": len(model_calls),
            "extra": {**ids, "steps": episode["steps"], "finished": episode["finished"]},
        },
        "created_at": episode["started_at"],
    }


MAX_BUCKETS = 1000
"""The most time buckets one stats answer holds per group (`bucket` too small for the span is refused)."""


def group_figures(row: dict[str, Any]) -> dict[str, Any]:
    """A group of `GET /episodes/stats` (mean reward: over the group's episodes, of each one's total reward)."""
    figures: dict[str, Any] = {
        "episodes": int(row["episodes"]),
        "finished": int(row["finished"]),
        "live": int(row["live"]),
        "mean_reward": _number(row["mean_reward"]),
        "min_reward": _number(row["min_reward"]),
        "max_reward": _number(row["max_reward"]),
        "mean_steps": _number(row["mean_steps"]),
        "first_started_at": iso(row["first_started"]),
        "last_started_at": iso(row["last_started"]),
    }
    if "key" in row:
        figures = {"key": row["key"], **figures}
    if "bucket" in row:
        figures = {"start": row["start"], **figures}
    return figures


def stats_answer(groups: list[dict[str, Any]], bucket: float | None) -> dict[str, Any]:
    shown = []
    for group in groups:
        figures = group_figures(group)
        if bucket is not None:
            figures["over_time"] = [
                group_figures({**row, "start": iso(float(row["bucket"]) * bucket)}) for row in group["over_time"]
            ]
        shown.append(figures)
    return {"groups": shown}


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def model_messages(n: int, call: dict[str, Any], inner: list[dict[str, Any]], accepted: int) -> list[dict[str, Any]]:
    """The model's n-th call as an `EvaluationRow`'s messages: the assistant's tool call and the tool's answer
    (`accepted`: how many of the model's calls before it were accepted; `inner`: the calls its code made)."""
    call_id = call.get("id") or f"call_{n}"
    arguments = json.dumps(call["arguments"] if call["arguments"] is not None else {})
    content = _text(call["output"]["blocks"]) if call["ok"] else f"Error: {call['error']}"
    message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "name": call["tool"], "content": content}
    if call["ok"]:
        output = call["output"]
        message["control_plane_step"] = {
            "step": accepted,
            "reward": output.get("reward") or 0.0,
            "terminated": bool(output.get("finished")),
            "info": output.get("metadata") or {},
            "tool_calls": [_signature(c) for c in inner] if inner else [_signature(call)],
            "num_tool_calls": len(inner) if inner else 1,
            **({"inner_calls": inner} if inner else {}),
        }
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": call["tool"], "arguments": arguments}}
            ],
        },
        message,
    ]


FORMATS = {"jsonl": lambda episode: episode, "evaluation_row": evaluation_row}


class EpisodeText:
    """One episode's JSON text, written as its calls are read a page at a time: `start()`, `calls(page)` for each
    page, `end()`. Joined, the pieces are `json.dumps(episode)` of the whole episode in `format` (`jsonl`,
    `evaluation_row`, or `show`: `ors-server episodes show`'s indented JSON), so memory holds one page, not the
    episode (and for `evaluation_row`, the calls of a CodeAct step until the step itself comes: they are recorded
    before it)."""

    def __init__(self, row: dict[str, Any], format: str) -> None:
        self.row, self.format, self.count = row, format, 0
        self.accepted = 0
        self.inner: dict[str, list[dict[str, Any]]] = {}

    def start(self) -> str:
        if self.format == "evaluation_row":
            return '{"messages": [' + json.dumps({"role": "user", "content": _text(loads(self.row["prompt"]))})
        if self.format == "show":
            return json.dumps(header(self.row), indent=2)[: -len("\n}")] + ',\n  "calls": ['
        return json.dumps(header(self.row))[:-1] + ', "calls": ['

    def calls(self, rows: list[dict[str, Any]]) -> str:
        parts = []
        for row in rows:
            call = call_of(row)
            if self.format == "evaluation_row":
                if call.get("step") is not None:
                    self.inner.setdefault(call["step"], []).append(call)
                    continue
                inner = self.inner.pop(call["id"], []) if call.get("id") else []
                parts += [", " + json.dumps(m) for m in model_messages(self.count, call, inner, self.accepted)]
                self.accepted += bool(call["ok"])
            elif self.format == "show":
                parts.append(("," if self.count else "") + "\n" + textwrap.indent(json.dumps(call, indent=2), "    "))
            else:
                parts.append((", " if self.count else "") + json.dumps(call))
            self.count += 1
        return "".join(parts)

    def end(self) -> str:
        if self.format == "evaluation_row":
            whole = evaluation_row({**header(self.row), "calls": []})
            whole["execution_metadata"]["tool_call_count"] = self.count
            del whole["messages"]
            return "], " + json.dumps(whole)[1:] + "\n"
        if self.format == "show":
            return ("\n  ]" if self.count else "]") + "\n}\n"
        return "]}\n"


def episode_text(db: Database, row: dict[str, Any], format: str) -> Iterator[str]:
    """An episode's JSON text in `format` (see `EpisodeText`), a page of calls at a time (synchronously)."""
    text = EpisodeText(row, format)
    yield text.start()
    after, more = -1, True
    while more:
        chunk, after, more = _calls_text(db, text, row["key"], after)
        yield chunk
    yield text.end()


def export_lines(db: Database, filters: Filters, format: str) -> Iterator[str]:
    """Every episode that passes `filters`, newest first, one JSON line each, in pieces (synchronously: the
    CLI's)."""
    cursor = None
    while True:
        page = db.episodes(**filters.query(), limit=EXPORT_PAGE, cursor=cursor)
        for listed in page.rows:
            row = db.state(listed["key"], full=True)
            if row is not None:
                yield from episode_text(db, row, format)
        if page.next is None:
            return
        cursor = parse_cursor(page.next)


class Reader:
    """The server's reads of the records database, each on a thread, on a connection of the reader's own."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._lanes = {"quick": _Lane(), "bulk": _Lane()}
        self.closing = anyio.Event()
        self.streams = 0
        """Event streams open (`faces.episodes` counts them, and bounds them by `--records-streams`)."""
        self.followers: Counter[str] = Counter()
        """Event streams open on each live episode (by key)."""
        self._marks: dict[str, tuple[int, float | None]] = {}
        self._marks_read = -math.inf
        self._marks_reading: anyio.Event | None = None

    async def _run(self, function: Callable[..., Any], *args: Any, lane: str = "quick", **kwargs: Any) -> Any:
        """`function(database, ...)` on the lane's thread and connection: `quick` for reads of a bounded size
        (lists, an episode's summary, marks), `bulk` for an episode's calls."""
        chosen = self._lanes[lane]

        def call() -> Any:
            if chosen.db is None:
                chosen.db = Database(self.target)
            return function(chosen.db, *args, **kwargs)

        return await anyio.to_thread.run_sync(call, limiter=chosen.limiter)

    async def close(self) -> None:
        self.closing.set()
        for lane in self._lanes.values():
            if lane.db is not None:
                await anyio.to_thread.run_sync(lane.db.close, limiter=lane.limiter)

    async def page(self, filters: Filters, limit: int, cursor: str | None) -> dict[str, Any]:
        position = parse_cursor(cursor) if cursor else None
        page = await self._run(Database.episodes, **filters.query(), limit=limit, cursor=position)
        return {"episodes": [summary(row) for row in page.rows], "next": page.next}

    async def stats(self, group_by: str | None, filters: Filters, bucket: float | None) -> dict[str, Any]:
        groups = await self._run(Database.stats, group_by, **filters.query(), bucket=bucket)
        return stats_answer(groups, bucket)

    async def episode(self, episode_id: str) -> dict[str, Any] | None:
        """The episode's row (without its calls), or None."""
        row: dict[str, Any] | None = await self._run(Database.episode, episode_id)
        return row

    async def episode_page(self, episode_id: str, after: int = -1, limit: int = CALLS_LIMIT) -> bytes | None:
        """`GET /episodes/{id}`'s answer (see `episode_page`), or None if there is no such episode."""
        row = await self._run(Database.episode, episode_id)
        if row is None:
            return None
        text: bytes = await self._run(episode_page, row, after, limit, lane="bulk")
        return text

    async def events(self, episode_id: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """("call", call) for each call of the episode, as they are recorded, then ("end", the episode); ("ping",
        {}) between looks at a live one (for keepalives)."""
        row = await self._run(Database.episode, episode_id)
        if row is None:
            return
        key, after = row["key"], -1
        self.followers[key] += 1
        try:
            while True:
                state = await self._run(Database.state, key)
                while True:
                    page = await self._run(Database.call_page, key, after, CALLS_LIMIT, PAGE_BYTES, lane="bulk")
                    for call in page.rows:
                        after = call["n"]
                        yield "call", call_of(call)
                    if not page.more:
                        break
                if state is None or state["ended_at"] is not None:
                    if state is not None:
                        yield "end", summary(state)
                    return
                seen = (state["calls"], state["ended_at"])
                while True:  # until something new is recorded of the episode (a mark is missing: look again)
                    with anyio.move_on_after(POLL):
                        await self.closing.wait()
                    if self.closing.is_set():
                        return
                    yield "ping", {}
                    if (await self._marks_of_followed()).get(key) != seen:
                        break
        finally:
            self.followers[key] -= 1
            if not self.followers[key]:
                del self.followers[key]

    async def _marks_of_followed(self) -> dict[str, tuple[int, float | None]]:
        """`Database.marks` of every followed episode, read in one query for all the streams and at most once
        per `POLL`: a stream reads its own episode only once its mark has changed, so a thousand streams on quiet
        episodes cost one query every `POLL`, not two thousand."""
        if anyio.current_time() - self._marks_read >= POLL / 2:
            if self._marks_reading is None:
                self._marks_reading = reading = anyio.Event()
                try:
                    self._marks = await self._run(Database.marks, list(self.followers))
                    self._marks_read = anyio.current_time()
                finally:
                    self._marks_reading = None
                    reading.set()
            else:
                await self._marks_reading.wait()
        return self._marks

    async def export(self, filters: Filters, format: str) -> AsyncIterator[str]:
        """Every episode that passes `filters`, newest first, one JSON line each, written a page of calls at a
        time (each page read and rendered on the bulk lane)."""
        cursor = None
        while True:
            page = await self._run(Database.episodes, **filters.query(), limit=EXPORT_PAGE, cursor=cursor)
            for listed in page.rows:
                row = await self._run(Database.state, listed["key"], full=True)
                if row is None:
                    continue  # forgotten meanwhile
                text = EpisodeText(row, format)
                yield text.start()
                after, more = -1, True
                while more:
                    chunk, after, more = await self._run(_calls_text, text, row["key"], after, lane="bulk")
                    yield chunk
                yield text.end()
            if page.next is None:
                return
            cursor = parse_cursor(page.next)


def _calls_text(db: Database, text: EpisodeText, key: str, after: int) -> tuple[str, int, bool]:
    """The page of an episode's calls after call `after`, as `text` writes them; its last call, and whether more
    follow."""
    page = db.call_page(key, after, CALLS_LIMIT, PAGE_BYTES)
    return text.calls(page.rows), page.rows[-1]["n"] if page.rows else after, page.more


@dataclass
class _Lane:
    """One connection and the thread that takes turns on it."""

    db: Database | None = None
    limiter: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(1))
