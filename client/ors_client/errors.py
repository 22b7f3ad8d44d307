"""The errors the client raises, each carrying the server's message (its `detail`) where there is one.

    OrsError                  any failure talking to the server (`.status`, `.detail`)
    ├── AuthError             401/403: a missing or wrong API key
    ├── ServerFull            503 that stayed 503 through the retries (`.retry_after`)
    ├── SessionNotFound       404 on a session: unknown, deleted or reaped (servers differ)
    ├── SessionExpired        410: the server ended the session (deleted, or reaped for idling)
    ├── ToolError             the tool itself failed (the SSE `error` event); the episode may go on
    ├── StreamCut             a call's event stream ended early and could not be resumed
    ├── ResponseTooLarge      an answer past the client's bounds (`max_body_bytes`, `max_event_bytes`)
    ├── Redirected            a redirect to another origin, not followed (the key and secrets stay here)
    └── ConnectionFailed      the server could not be reached, after the retries

A tool call the server refuses as the agent's mistake (unknown tool, bad input, finished episode) is not an
exception: it comes back as a `ToolOutput` with `ok=False` and the reason, as the wire has it.
"""

from __future__ import annotations


class OrsError(Exception):
    """A request to an ORS server failed."""

    def __init__(self, detail: str, status: int | None = None) -> None:
        super().__init__(detail if status is None else f"{status}: {detail}")
        self.detail = detail
        self.status = status


class AuthError(OrsError):
    """The server refused the API key (or wanted one)."""


class ServerFull(OrsError):
    """The server stayed full (503) through every retry."""

    def __init__(self, detail: str, status: int | None = 503, retry_after: float | None = None) -> None:
        super().__init__(detail, status)
        self.retry_after = retry_after


class SessionNotFound(OrsError):
    """The server does not know the session (never created, deleted, or reaped)."""


class SessionExpired(OrsError):
    """The server has ended the session (deleted, or reaped after idling past its timeout)."""


class ToolError(OrsError):
    """The tool raised inside the environment; the server's message is `detail`."""


class StreamCut(OrsError):
    """A tool call's event stream ended before its result and resuming it by `task_id` did not succeed."""


class ConnectionFailed(OrsError):
    """The server could not be reached (or the connection broke) and the request could not be retried."""


class ResponseTooLarge(OrsError):
    """The server's answer was larger than the client accepts (`max_body_bytes` for a body or a call's result,
    `max_event_bytes` for one line or event of a stream); the connection was closed without reading the rest."""


class Redirected(OrsError):
    """The server redirected to another origin (scheme, host or port): not followed, because the request carries
    the API key and the session's secrets, which go to the client's own server only."""
