"""Session ids that name the worker that made their session.

An id a worker mints as it creates the session (an MCP transport id, an OpenEnv session id) looks like
`w<index>-<incarnation>-<check>:<random>`. It is a hint, never trusted for placement (anyone can write one):
a front that meets such an id for the first time asks that worker first whether it holds it, and when no
live worker holds it and that incarnation is gone, answers 410 rather than 404. A restarted worker has a new
incarnation, so ids of the one that died never name it. The two hex characters of `check` make an id that
merely looks tagged (and fails the check) count as no hint at all.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
import uuid
from dataclasses import dataclass
from functools import cache
from hashlib import blake2b

_TAGGED = re.compile(r"w(\d{1,6})-(\d{1,9})-([0-9a-f]{2}):(.+)", re.DOTALL)


@dataclass(frozen=True)
class WorkerTag:
    """One incarnation of one worker slot of a deployment."""

    index: int
    incarnation: int

    def __str__(self) -> str:
        return f"w{self.index}-{self.incarnation}"

    @classmethod
    def parse(cls, text: str) -> WorkerTag:
        match = re.fullmatch(r"w(\d{1,6})-(\d{1,9})", text)
        if match is None:
            raise ValueError(f"worker tag must look like w<index>-<incarnation>, got {text!r}")
        return cls(int(match[1]), int(match[2]))

    def tag(self, rest: str) -> str:
        """`rest` as an id that routes to this worker."""
        return f"{self}-{_check(str(self), rest)}:{rest}"

    def mint(self) -> str:
        """A new random session id owned by this worker."""
        return self.tag(str(uuid.uuid4()))


@cache
def worker_tag(text: str | None) -> WorkerTag | None:
    """The parsed `Settings.worker_tag` (None for a server that is not a worker)."""
    return WorkerTag.parse(text) if text else None


def mint(tag: str | None) -> str:
    """A new session id; it names the worker when the server is one (`Settings.worker_tag`)."""
    parsed = worker_tag(tag)
    return parsed.mint() if parsed else str(uuid.uuid4())


def _check(prefix: str, rest: str) -> str:
    return blake2b(f"{prefix}:{rest}".encode(), digest_size=1).hexdigest()


def split(session_id: str) -> tuple[WorkerTag, str] | None:
    """The worker a tagged id names and the untagged rest, or None for an id no worker minted."""
    match = _TAGGED.fullmatch(session_id)
    if match is None:
        return None
    tag = WorkerTag(int(match[1]), int(match[2]))
    if _check(str(tag), match[4]) != match[3]:
        return None
    return tag, match[4]


class _CallIds:
    """Call ids: this process's random 64-bit prefix and a counter, as 32 hex characters (a `uuid4().hex`'s
    shape). Unique across processes and restarts, as the records need (they key calls by id), for the cost of a
    counter: `uuid4` was ~3% of an ORS call's CPU (an `os.urandom` and a `UUID` object per call). A call id is
    no secret (a replay needs the session's id too), so it need not be unguessable. A forked child draws its own
    prefix."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._prefix = secrets.token_hex(8)
        self._counter = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter):016x}"


call_id = _CallIds()
"""A new call id (`call_id()`)."""
