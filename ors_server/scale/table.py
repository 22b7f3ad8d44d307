"""The workers a front routes to, their load as the front last heard it, and where a new session goes.

Which worker holds an existing session is not in this table: the front's directory (`directory`) and its
lookups answer that. This table knows each worker slot's current incarnation and state, and the load each
worker last reported (`ors_server.http.lookup`), so that `place` picks the live worker with the most room.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ors_server.ids import WorkerTag


class State(Enum):
    STARTING = "starting"
    LIVE = "live"
    DRAINING = "draining"
    DEAD = "dead"


@dataclass(frozen=True)
class Address:
    """Where a worker listens: a Unix socket path (`uds`) or a TCP host and port."""

    host: str = "127.0.0.1"
    port: int = 0
    uds: str | None = None

    @property
    def authority(self) -> str:
        return "localhost" if self.uds else f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"unix:{self.uds}" if self.uds else f"http://{self.host}:{self.port}"


@dataclass(eq=False)
class Worker:
    tag: WorkerTag
    address: Address
    state: State = State.LIVE
    in_flight: int = 0
    """Requests this front has in flight to the worker."""
    sessions: int = 0
    """Sessions the worker held at its last reply to this front (`x-ors-load`)."""
    calls: int = 0
    """Tool calls it was running then."""
    capacity: int | None = None
    """Its `max_sessions` (None until it has replied once)."""
    placing: int = 0
    """Creates this front has sent it that it has not answered yet: counted as sessions already."""

    @property
    def live(self) -> bool:
        return self.state is State.LIVE

    @property
    def load(self) -> int:
        """Sessions and running calls, as last reported, plus this front's creates on their way."""
        return self.sessions + self.calls + self.placing

    @property
    def full(self) -> bool:
        return self.capacity is not None and self.sessions + self.placing >= self.capacity

    def report(self, sessions: int, calls: int, capacity: int) -> None:
        self.sessions, self.calls, self.capacity = sessions, calls, capacity


class Lost(Exception):
    """The key's session lived on a worker that is gone: answered 410 without forwarding."""


class Unavailable(Exception):
    """No live worker can take this request now (its slot's worker is restarting): 503 with Retry-After."""


class WorkerTable:
    """Worker slots `0..size-1`, each holding its current incarnation (or None while it has none)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a deployment needs at least 1 worker, got {size}")
        self.size = size
        self.slots: list[Worker | None] = [None] * size
        self.version = 0
        self._turn = itertools.count()
        self.listener: Callable[[], None] | None = None  # told of every change (the supervisor publishes it)

    def _changed(self) -> None:
        self.version += 1
        if self.listener is not None:
            self.listener()

    def put(self, worker: Worker) -> None:
        self.slots[worker.tag.index] = worker
        self._changed()

    def mark(self, tag: WorkerTag, state: State) -> bool:
        """Set the state of incarnation `tag`, if it is still current; True if it changed."""
        worker = self.slots[tag.index] if tag.index < self.size else None
        if worker is None or worker.tag != tag or worker.state is state:
            return False
        worker.state = state
        self._changed()
        return True

    def rows(self) -> list[dict[str, Any] | None]:
        """The table as JSON-ready rows (slot order), as a supervisor publishes it to its fronts."""
        return [
            None
            if w is None
            else {"tag": str(w.tag), "host": w.address.host, "port": w.address.port, "uds": w.address.uds}
            | {"state": w.state.value}
            for w in self.slots
        ]

    def apply(self, rows: Sequence[dict[str, Any] | None]) -> None:
        """Follow a published table: a new incarnation replaces its slot's worker; a known one takes its new
        state, except that this front's own verdict of death stands (its in-flight counts are kept)."""
        for index, row in enumerate(rows[: self.size]):
            if row is None:
                continue
            tag, state = WorkerTag.parse(row["tag"]), State(row["state"])
            current = self.slots[index]
            if current is not None and current.tag == tag:
                if current.state is not State.DEAD:
                    self.mark(tag, state)
            else:
                self.put(Worker(tag, Address(row["host"], row["port"], row.get("uds")), state))

    def workers(self) -> list[Worker]:
        return [w for w in self.slots if w is not None]

    def live(self) -> list[Worker]:
        return [w for w in self.slots if w is not None and w.live]

    def current(self, tag: WorkerTag) -> Worker | None:
        """The worker incarnation `tag` names if it is still in its slot and not dead; else None (it is gone)."""
        worker = self.slots[tag.index] if tag.index < self.size else None
        if worker is None or worker.tag != tag or worker.state is State.DEAD:
            return None
        return worker

    def place(self, exclude: Collection[Worker] = ()) -> Worker:
        """The worker for a new session (or a request that names none): among live workers, one that is not
        full, with the least load (sessions + running calls, as last reported, + creates on their way), then
        the fewest requests in flight from this front; equals take turns, so new sessions spread evenly.
        Raises Unavailable when no worker is live."""
        live = [w for w in self.slots if w is not None and w.state is State.LIVE and w not in exclude]
        if not live:
            raise Unavailable(None)
        start = next(self._turn) % len(live)
        turned = live[start:] + live[:start]
        return min(turned, key=lambda w: (w.full, w.load, w.in_flight))
