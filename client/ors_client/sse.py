"""Reading server-sent events as ORS servers send them.

Only what the ORS call protocol uses: `event:` and `data:` fields, comments (keepalives, ignored), any of the
three line endings. A `data:` value loses exactly one leading space, as the SSE standard says (the `openreward`
client strips all leading whitespace and so corrupts a result chunk that starts with a space).

Bounded and linear: a line still waiting for its end is kept as the pieces that arrived (joined once, when it
ends), so a long line costs what it weighs, not what it weighs times the number of chunks it came in; and a line
or an event's data longer than `max_event_bytes` raises `ResponseTooLarge` as soon as it is known.
"""

from __future__ import annotations

from dataclasses import dataclass

from ors_client.errors import ResponseTooLarge

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024


@dataclass(slots=True)
class Event:
    event: str
    data: str


class Parser:
    """Feed bytes as they arrive; get back the events they complete."""

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._pending: list[bytes] = []
        """The start of a line whose end has not arrived, in the pieces it came in."""
        self._pending_bytes = 0
        self._after_cr = False
        """The last chunk ended with CR: a LF at the start of the next is the second half of that CRLF."""
        self._event = ""
        self._data: list[str] = []
        self._data_bytes = 0

    def feed(self, chunk: bytes) -> list[Event]:
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._after_cr = chunk[-1:] == b"\r"
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *ended, rest = chunk.split(b"\n")
        events: list[Event] = []
        if ended:
            self._pending.append(ended[0])
            ended[0] = b"".join(self._pending)
            self._pending, self._pending_bytes = [], 0
            for line in ended:
                self._line(line, events)
        if rest:
            self._pending.append(rest)
            self._pending_bytes += len(rest)
            if self._pending_bytes > self.max_event_bytes:
                raise self._too_large("a line")
        return events

    def _line(self, raw: bytes, events: list[Event]) -> None:
        if not raw:  # a blank line dispatches the event
            if self._data or self._event:
                events.append(Event(self._event or "message", "\n".join(self._data)))
            self._event, self._data, self._data_bytes = "", [], 0
            return
        if len(raw) > self.max_event_bytes:
            raise self._too_large("a line")
        if raw[:1] == b":":  # a comment: the server's keepalive
            return
        line = raw.decode("utf-8")
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_bytes += len(raw)
            if self._data_bytes > self.max_event_bytes:
                raise self._too_large("an event's data")
            self._data.append(value)
        elif name == "event":
            self._event = value

    def _too_large(self, what: str) -> ResponseTooLarge:
        return ResponseTooLarge(
            f"the server sent {what} longer than {self.max_event_bytes} bytes "
            "(the client's max_event_bytes); the stream was closed"
        )
