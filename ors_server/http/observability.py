"""What the server tells its operators: Prometheus metrics at `/metrics` and one access-log line per request.

Access logs are logfmt key=value lines on the `ors_server.access` logger: method, path, status, latency, face,
session id, environment and tool. Headers and bodies (where secrets travel) are never logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ors_server.calls import Calls, Observer, ToolCall, outcome
from ors_server.codeact.tool import EXECUTE_CODE
from ors_server.faces import FaceTable
from ors_server.sessions import SessionStore

access_log = logging.getLogger("ors_server.access")

CLIENT_DISCONNECTED = "client_disconnected"
CLIENT_CLOSED_REQUEST = 499
"""The access log's status for a request its client abandoned (nginx's convention)."""
_STATUS_CLASSES = {1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}

SESSION_EVENTS = ("created", "deleted", "reaped", "shutdown", "setup_failed")
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class _StoreCollector(Collector):
    """Live sessions and session lifecycle counts, read from the store at scrape time."""

    def __init__(self, store: SessionStore, calls: Calls) -> None:
        self.store, self.calls = store, calls

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        live = GaugeMetricFamily("ors_live_sessions", "Sessions alive now, per environment", labels=["env"])
        per_env: dict[str, int] = {}
        for session in self.store.sessions():
            per_env[session.env_name] = per_env.get(session.env_name, 0) + 1
        for env, count in sorted(per_env.items()):
            live.add_metric([env], count)
        yield live
        events = CounterMetricFamily("ors_sessions", "Sessions by lifecycle event", labels=["event"])
        for event in SESSION_EVENTS:
            events.add_metric([event], self.store.counts[event])
        yield events
        in_use = GaugeMetricFamily("ors_threads_in_use", "Worker threads busy, per pool", labels=["pool"])
        capacity = GaugeMetricFamily("ors_threads_capacity", "Worker threads allowed, per pool", labels=["pool"])
        for pool, limiter in self.store.runtime.limiters.items():
            in_use.add_metric([pool], limiter.borrowed_tokens)
            capacity.add_metric([pool], limiter.total_tokens)
        yield in_use
        yield capacity
        yield GaugeMetricFamily(
            "ors_overdue_calls",
            "Sync tool calls past --tool-timeout whose threads still run (each holds a tool thread and its session)",
            value=self.calls.overdue,
        )


class Metrics(Observer):
    """The Prometheus registry: the store's state read at scrape time, calls counted as they end (an observer
    of the call pipeline), requests counted by `Observe`."""

    def __init__(self, store: SessionStore, calls: Calls, faces: FaceTable) -> None:
        self.store, self.calls = store, calls
        self.registry = CollectorRegistry()
        self.registry.register(_StoreCollector(store, calls))
        self.tool_calls = Counter(
            "ors_tool_calls",
            "Tool calls by environment, tool and outcome",
            ["env", "tool", "outcome"],
            registry=self.registry,
        )
        self.tool_seconds = Histogram(
            "ors_tool_call_seconds",
            "Time a tool call takes in the session, queueing included",
            ["env"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "ors_request_seconds",
            "HTTP request latency per face",
            ["face"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._call_children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self.request_seconds_by_face = {face: self.request_seconds.labels(face) for face in faces.names}
        self.requests = Counter(
            "ors_requests",
            "HTTP requests by face and outcome: the status class, or client_disconnected",
            ["face", "outcome"],
            registry=self.registry,
        )
        self._request_children: dict[tuple[str, str], Any] = {}
        calls.observe(self)

    def call_ended(self, call: ToolCall) -> None:
        session, tool = call.session, call.name
        assert call.result is not None
        # Unknown tool names come from clients: keep them out of the label space.
        label = tool if tool == EXECUTE_CODE or self.calls.has_tool(session, tool) else "<unknown>"
        key = (session.env_name, label, outcome(call.result))
        children = self._call_children.get(key)
        if children is None:  # labels() takes a lock and builds a key each time: look each series up once
            children = (self.tool_calls.labels(*key), self.tool_seconds.labels(session.env_name))
            self._call_children[key] = children
        children[0].inc()
        children[1].observe(call.ended_at - call.started)

    def count_request(self, face: str, outcome: str) -> None:
        child = self._request_children.get((face, outcome))
        if child is None:
            child = self._request_children[(face, outcome)] = self.requests.labels(face, outcome)
        child.inc()

    async def endpoint(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class Observe:
    """ASGI middleware: time every request for the per-face histogram and write its access-log line."""

    def __init__(self, app: ASGIApp, metrics: Metrics, faces: FaceTable) -> None:
        self.app = app
        self.metrics = metrics
        self.faces = faces

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500
        face = self.faces.of(scope).name

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        outcome = None
        try:
            await self.app(scope, receive, send_status)
        except ClientDisconnect:
            # The client went away while sending its request: no one to answer, and not the server's fault (before,
            # this reached uvicorn as a 500 with a traceback: a log flood with many slow clients).
            outcome, status = CLIENT_DISCONNECTED, CLIENT_CLOSED_REQUEST
        finally:
            seconds = time.perf_counter() - started
            self.metrics.request_seconds_by_face[face].observe(seconds)
            self.metrics.count_request(face, outcome or _STATUS_CLASSES.get(status // 100, "other"))
            if access_log.isEnabledFor(logging.INFO):
                access_log.info(_access_line(scope, status, seconds, face))


def _access_line(scope: Scope, status: int, seconds: float, face: str) -> str:
    headers = dict(scope["headers"])
    path_params = scope.get("path_params") or {}
    named = path_params.get("session_id")  # an MCP episode URL names its session in the path
    session = named.encode("latin-1", "replace") if isinstance(named, str) and named else None
    session = session or headers.get(b"x-session-id") or headers.get(b"mcp-session-id") or b"-"
    state = scope.get("state") or {}
    env = path_params.get("env") or state.get("env") or "-"
    fields = {
        "method": scope["method"],
        "path": scope["path"][:200],
        "status": status,
        "ms": f"{seconds * 1000:.1f}",
        "face": face,
        "session": session.decode("latin-1")[:128],
        "env": str(env)[:64],
        "tool": str(state.get("tool", "-"))[:64],
    }
    return " ".join(f"{key}={_quoted(str(value))}" for key, value in fields.items())


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _quoted(value: str) -> str:
    """`value` as one logfmt value: bare when it is plain, else quoted, with quotes, backslashes and every control
    or line-breaking character escaped. Paths and session ids come from clients: a raw `%0a` in one must not
    write a second, forged line into the log."""
    if value and value.isprintable() and not any(c in value for c in ' "=\\'):
        return value
    return '"' + "".join(_ESCAPES.get(c) or (c if c.isprintable() else _escape(c)) for c in value) + '"'


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
