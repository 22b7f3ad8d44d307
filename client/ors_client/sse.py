"""Reading server-sent events as ORS servers send them.

Only what the ORS call protocol uses: `event:` and `data:` fields, comments (keepalives, ignored), any of the
three line endings. A `data:` value loses exactly one leading space, as the SSE standard says (the `openreward`
client strips all leading whitespace and so corrupts a result chunk that starts with a space).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Event:
    event: str
    data: str


class Parser:
    """Feed bytes as they arrive; get back the events they complete."""

    def __init__(self) -> None:
        self._buffer = b""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[Event]:
        buffer = self._buffer + chunk
        # A CR at the very end may be the first half of a CRLF: keep it for the next chunk.
        if buffer.endswith(b"\r"):
            buffer, self._buffer = buffer[:-1], b"\r"
        else:
            self._buffer = b""
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, rest = buffer.split(b"\n")
        self._buffer = rest + self._buffer
        events: list[Event] = []
        for raw in lines:
            if not raw:  # a blank line dispatches the event
                if self._data or self._event:
                    events.append(Event(self._event or "message", "\n".join(self._data)))
                self._event, self._data = "", []
                continue
            if raw[:1] == b":":  # a comment: the server's keepalive
                continue
            line = raw.decode("utf-8")
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
        return events
