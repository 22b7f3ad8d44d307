"""Domain errors: what the session core raises and each face maps to its own wire shape.

    OrsError
    ├── BadRequest               the request itself is wrong (400)
    │   ├── InvalidSessionId
    │   ├── InvalidSplit
    │   ├── InvalidIndex
    │   ├── InvalidTask          `task_from_seed` found no task for the seed and config
│   ├── TaskRejected         the environment's setup raised `InvalidTaskSpec`: the client's task spec names no task
    │   ├── SessionExists
    │   └── WrongEnvironment     a session addressed through another environment's path
    ├── Refused                  refused before any face ran: auth (401), body size (413), a transport's own checks
    ├── TaskTooLarge             a task spec or MCP config past --max-task-spec-bytes (413)
    ├── TooManyTransports        an episode already has --max-mcp-transports-per-session MCP transports (429)
    ├── NotFound                 (404)
    │   ├── EnvironmentNotFound
    │   └── SessionNotFound      never created, or ended so long ago that it is no longer remembered
    ├── SessionDeleted           deleted on purpose; remembered for a while (410)
    │   └── SessionExpired       reaped after --session-timeout without a request; remembered the same way (410)
    ├── Unavailable              try again later (503, Retry-After)
    │   ├── SessionStarting      setup() still running after the wait bound
    │   ├── CapacityReached      --max-sessions live sessions already
    │   ├── SessionBusy          a timed-out tool call still runs in the session
    │   ├── ToolServerUnavailable  a composed MCP tool server did not start or list its tools in time
    │   ├── StreamsFull          --records-streams episode event streams already open
    │   └── ShuttingDown
    ├── SetupFailed              setup() raised; the session stays until deleted (500)
    └── ReadFailed               the environment raised while the store read its prompt or first observation (500)

Expected tool outcomes (unknown tool, bad input, finished episode) are not exceptions: they are
`ToolRejected` results of the call pipeline (see `calls.py`).
"""

from __future__ import annotations

from collections.abc import Mapping


class OrsError(Exception):
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def headers(self) -> dict[str, str]:
        """HTTP headers every face sends with this error, whatever its body shape."""
        return {}


class BadRequest(OrsError):
    status = 400


class InvalidSessionId(BadRequest):
    pass


class InvalidSplit(BadRequest):
    def __init__(self) -> None:
        super().__init__("Invalid split")


class InvalidIndex(BadRequest):
    def __init__(self, message: str = "Invalid index") -> None:
        super().__init__(message)


class InvalidTask(BadRequest):
    pass


class TaskRejected(BadRequest):
    pass


class SessionExists(BadRequest):
    def __init__(self) -> None:
        super().__init__("Session already exists")


class WrongEnvironment(BadRequest):
    def __init__(self, session_env: str, path_env: str) -> None:
        super().__init__(f"session belongs to environment '{session_env}', not '{path_env}'")


class NotFound(OrsError):
    status = 404


class EnvironmentNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown environment '{name}'")


class SessionNotFound(NotFound):
    def __init__(self) -> None:
        super().__init__("Active environment not found")


class SessionDeleted(OrsError):
    status = 410

    def __init__(self, message: str = "Session deleted") -> None:
        super().__init__(message)


class SessionExpired(SessionDeleted):
    """Reaped for inactivity: the id answers 410 with how long it had been idle, until it is forgotten."""

    def __init__(self, timeout: float) -> None:
        super().__init__(f"Session expired after {timeout:g} s of inactivity (--session-timeout)")
        self.timeout = timeout


class Refused(OrsError):
    """A refusal with its own HTTP status, made before a face's handlers ran."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self._headers = dict(headers or {})

    @property
    def headers(self) -> dict[str, str]:
        return self._headers


class TaskTooLarge(OrsError):
    status = 413

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} is {size} bytes as JSON, more than the limit of {limit} (--max-task-spec-bytes)")


class TooManyTransports(OrsError):
    status = 429

    def __init__(self, session_id: str, limit: int) -> None:
        super().__init__(
            f"session {session_id} already has {limit} open MCP transports (--max-mcp-transports-per-session); "
            "close one (HTTP DELETE) first"
        )


class Unavailable(OrsError):
    status = 503
    retry_after = 2
    """Seconds a client should wait before trying again: the one source of every `Retry-After`."""
    backend_state: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class SessionStarting(Unavailable):
    backend_state = "starting"

    def __init__(self) -> None:
        super().__init__("Environment still starting.")


class CapacityReached(Unavailable):
    def __init__(self, limit: int) -> None:
        super().__init__(f"server is at its limit of {limit} live sessions")


class StreamsFull(Unavailable):
    def __init__(self, limit: int) -> None:
        super().__init__(f"server is at its limit of {limit} open episode event streams")


class SessionBusy(Unavailable):
    def __init__(self) -> None:
        super().__init__("an earlier call in this session timed out and is still running")


class ToolServerUnavailable(Unavailable):
    pass


class ShuttingDown(Unavailable):
    def __init__(self) -> None:
        super().__init__("server is shutting down")


class SetupFailed(OrsError):
    status = 500


class ReadFailed(OrsError):
    status = 500
