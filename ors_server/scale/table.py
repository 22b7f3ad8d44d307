"""The workers a front routes to, and which of them owns a session key.

The table holds no session state: a tagged id names its worker, and a client-chosen id hashes to a slot
whose owner is fixed by the number of worker slots. Slots never move while a deployment runs, so a
session is never stranded on a worker that does not hold it; a slot whose worker is down (being restarted,
or re-placed by Ray) has no owner until it is back.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ors_server.scale.ids import WorkerTag, slot_of, split


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

    @property
    def live(self) -> bool:
        return self.state is State.LIVE


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

    def owner(self, key: str) -> Worker:
        """The live worker holding (or to hold) session `key`; raises Lost or Unavailable."""
        tagged = split(key)
        if tagged is not None:
            tag = tagged[0]
            worker = self.slots[tag.index] if tag.index < self.size else None
            if worker is None or worker.tag != tag or worker.state is State.DEAD:
                raise Lost(key)
            return worker
        worker = self.slots[slot_of(key) % self.size]
        if worker is None or worker.state is State.DEAD or worker.state is State.STARTING:
            raise Unavailable(key)
        return worker

    def place(self) -> Worker:
        """A worker for a request that names no session: the live one with the fewest requests in flight,
        taking turns among equals so new sessions spread evenly."""
        live = [w for w in self.slots if w is not None and w.state is State.LIVE]
        if not live:
            raise Unavailable(None)
        start = next(self._turn) % len(live)
        turned = live[start:] + live[:start]
        return min(turned, key=lambda w: w.in_flight)
