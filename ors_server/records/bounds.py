"""What a record may keep: its size counted in bytes, and text past a bound cut to its start and a marker.

Two bounds apply when the recorder turns a call (or a task, or a prompt) into a row: `--records-call-max-bytes`
for any one row, and the room left under `--records-max-bytes` (`Budget.room`, each writer's share of what the
database has not used yet). A row larger than what it may take keeps the start of its text and a marker naming its
size and the bound it met; the bytes left out are counted as the row's (and its episode's) `truncated`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ROW_BYTES = 200
"""Bytes counted for every row besides its text: its numbers, keys, index entries and page overhead. Measured: 20
episodes of 100 small calls made a 696 kB SQLite file where their text took 331 kB (about 180 bytes more per call);
counted with this allowance, 731 kB."""
FLOOR = 256
"""Bytes of text any row may keep whatever the room left (a marker takes about this much anyway): a small call
past the bound keeps its arguments and answer."""
_ENCODER = json.JSONEncoder(default=str, ensure_ascii=False)


def size(text: str | None) -> int:
    """The bytes `text` takes as UTF-8 (what the database stores), not its characters."""
    if text is None:
        return 0
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


@dataclass
class Budget:
    """What the rows of one batch may take: `call_max` each, and `room` between them (spent as they are made).
    `refill(needed)`, asked at most once, when a row would be cut for want of room, prunes to make room for
    `needed` bytes and says how much room the database has now (None: no more than before)."""

    call_max: int
    room: float = math.inf
    refill: Callable[[int], float | None] | None = None
    spent: int = 0

    def allowed(self, needed: int) -> tuple[int, str]:
        """The bytes the next row (of `needed` bytes whole) may take, and the setting that bounds it (for the
        marker)."""
        wanted = min(needed, self.call_max)
        if wanted > self.room and self.refill is not None:
            refill, self.refill = self.refill, None
            fresh = refill(wanted + self.spent)
            if fresh is not None:
                self.room = fresh - self.spent  # the rows made so far are not in the database yet
        if self.call_max <= self.room:
            return max(self.call_max, FLOOR), "--records-call-max-bytes"
        return max(int(self.room), FLOOR), "--records-max-bytes"

    def spend(self, taken: int) -> None:
        self.room -= taken
        self.spent += taken


def note(original: int, allowed: int, bound: str) -> str:
    return f"[record truncated: {original} bytes, cut to {allowed} ({bound})]"


def head(text: str, room: int) -> str:
    """The longest start of `text` that takes at most `room` bytes as UTF-8 (never half a character)."""
    if room <= 0:
        return ""
    if size(text) <= room:
        return text
    return text[:room].encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")


def fit(render: Callable[[str], str], text: str, room: int) -> str:
    """`render(start of text)` for the longest start of `text` whose rendering takes at most `room` bytes (escapes
    may make a rendering larger than its text); `render("")` if none does."""
    kept = head(text, room)
    rendered = render(kept)
    while kept and size(rendered) > room:
        kept = head(kept, size(kept) - (size(rendered) - room) - 8)
        rendered = render(kept)
    return rendered


def cut_json(encoded: str, allowed: int, bound: str) -> str:
    """A JSON value (`encoded`) too large for its row, as a JSON string: the start of its text, then the marker."""
    marker = note(size(encoded), allowed, bound)
    return fit(lambda kept: _ENCODER.encode(f"{kept} {marker}" if kept else marker), encoded, allowed)


def cut_text(text: str, allowed: int, bound: str) -> str:
    """A plain text (an error) too large for its row: its start, then the marker."""
    marker = note(size(text), allowed, bound)
    return head(text, allowed - size(marker) - 1) + "\n" + marker if allowed > size(marker) else marker


def cut_blocks(texts: list[str], original: int, allowed: int, bound: str, extra: dict[str, Any] | None) -> str:
    """Content blocks (an output's, a prompt's) too large for their row, as the JSON of one text block: the start
    of their text (images are left out), then the marker; `extra` are the fields kept beside the blocks (an
    output's reward and finished), or none for a bare list of blocks (a prompt)."""
    marker = note(original, allowed, bound)

    def render(kept: str) -> str:
        blocks = [{"type": "text", "text": f"{kept}\n{marker}" if kept else marker}]
        return _ENCODER.encode(blocks if extra is None else {"blocks": blocks, **extra})

    return fit(render, "\n".join(texts), allowed)
