"""What the server tells its operators: Prometheus metrics at `/metrics` and one access-log line per request.

Access logs are logfmt key=value lines on the `ors_server.access` logger: method, path, status, latency, face,
session id, environment and tool. Headers and bodies (where secrets travel) are never logged.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from ors_server.calls import Calls, Observer, ToolCall, outcome
from ors_server.codeact.tool import EXECUTE_CODE
from ors_server.faces import FaceTable
from ors_server.sessions import SessionStore

access_log = logging.getLogger("ors_server.access")

CLIENT_DISCONNECTED = "client_disconnected"
CLIENT_CLOSED_REQUEST = 499
"""The access log's status for a request its client abandoned (nginx's convention)."""
STATUS_CLASSES = {1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}

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


class Tally(Collector):
    """Counters and latency histograms kept as plain numbers where calls and requests end, handed to Prometheus
    only at scrape time: on the call path an observation is a dict lookup, a bisection and two additions (a
    `prometheus_client` child takes a lock and loops over its buckets in Python for each). The event loop's thread
    is the only writer and reader (observers and the `/metrics` endpoint run there)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], int] = {}  # (env, tool, outcome)
        self.requests: dict[tuple[str, str], int] = {}  # (face, outcome)
        self.call_seconds: dict[str, list[float]] = {}  # by env: a count per bucket (the last +Inf), then the sum
        self.request_seconds: dict[str, list[float]] = {}  # by face

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        calls = CounterMetricFamily(
            "ors_tool_calls", "Tool calls by environment, tool and outcome", labels=["env", "tool", "outcome"]
        )
        for key, count in self.counts.items():
            calls.add_metric(list(key), count)
        yield calls
        yield _histogram(
            "ors_tool_call_seconds",
            "Time a tool call takes in the session, queueing included",
            "env",
            self.call_seconds,
        )
        yield _histogram("ors_request_seconds", "HTTP request latency per face", "face", self.request_seconds)
        requests = CounterMetricFamily(
            "ors_requests",
            "HTTP requests by face and outcome: the status class, or client_disconnected",
            labels=["face", "outcome"],
        )
        for face_outcome, count in self.requests.items():
            requests.add_metric(list(face_outcome), count)
        yield requests


def observe(rows: dict[str, list[float]], label: str, seconds: float) -> None:
    row = rows.get(label)
    if row is None:
        row = rows[label] = [0.0] * (len(LATENCY_BUCKETS) + 2)
    row[bisect_left(LATENCY_BUCKETS, seconds)] += 1  # the first bucket whose bound is >= seconds, as Prometheus
    row[-1] += seconds


def _histogram(name: str, doc: str, label: str, rows: dict[str, list[float]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=[label])
    bounds = [*(floatToGoString(bound) for bound in LATENCY_BUCKETS), "+Inf"]
    for value, row in rows.items():
        cumulative = list(accumulate(row[:-1]))
        family.add_metric([value], buckets=list(zip(bounds, cumulative, strict=True)), sum_value=row[-1])
    return family


class Metrics(Observer):
    """The Prometheus registry: the store's state read at scrape time, calls counted as they end (an observer
    of the call pipeline), requests counted by `ors_server.http.entry` (both in a `Tally`)."""

    def __init__(self, store: SessionStore, calls: Calls, faces: FaceTable) -> None:
        self.store, self.calls = store, calls
        self.registry = CollectorRegistry()
        self.registry.register(_StoreCollector(store, calls))
        self.tally = Tally()
        for face in faces.names:  # every face's latency series exists from the start, at zero
            self.tally.request_seconds[face] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        self.registry.register(self.tally)
        calls.observe(self)

    def call_ended(self, call: ToolCall) -> None:
        session, tool = call.session, call.name
        assert call.result is not None
        # Unknown tool names come from clients: keep them out of the label space.
        label = tool if tool == EXECUTE_CODE or self.calls.has_tool(session, tool) else "<unknown>"
        key = (session.env_name, label, outcome(call.result))
        counts = self.tally.counts
        counts[key] = counts.get(key, 0) + 1
        observe(self.tally.call_seconds, session.env_name, call.ended_at - call.started)

    def observe_request(self, face: str, outcome: str, seconds: float) -> None:
        """One HTTP request of `face` ended with `outcome` (a status class, or client_disconnected) in `seconds`."""
        observe(self.tally.request_seconds, face, seconds)
        requests = self.tally.requests
        requests[(face, outcome)] = requests.get((face, outcome), 0) + 1

    async def endpoint(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


def access_line(scope: Scope, status: int, seconds: float, face: str) -> str:
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
