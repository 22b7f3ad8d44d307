"""Test environments for the ORS conformance suite and the session-core tests, plus wire helpers.

The environments are written only against the public authoring API. What they observe (constructions,
setups, tool runs, teardowns, the secrets they were given) is recorded in module-level journals keyed by a
`tag` the test puts into the session's task spec, so tests can count what happened inside the server
thread without touching the server's internals. Gates (`threading.Event`s keyed by tag) let a test hold a
tool or a `setup()` open for exactly as long as it needs, instead of sleeping.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from pydantic import BaseModel

from ors_server import Environment, ImageBlock, Split, TextBlock, ToolOutput, tool

# Journals shared with the server thread.

_lock = threading.Lock()
_journal: defaultdict[str, list[str]] = defaultdict(list)
_gates: dict[str, threading.Event] = {}
_barriers: dict[str, threading.Barrier] = {}
_secrets_seen: dict[str, dict[str, str]] = {}

GATE_TIMEOUT = 10.0
"""How long a gated tool or setup waits before giving up, so a broken test cannot hang the server."""


def new_tag() -> str:
    return uuid.uuid4().hex


def record(tag: str, what: str) -> None:
    with _lock:
        _journal[tag].append(what)


def journal(tag: str) -> list[str]:
    with _lock:
        return list(_journal.get(tag, []))


def count(tag: str, what: str) -> int:
    return journal(tag).count(what)


def gate(tag: str) -> threading.Event:
    with _lock:
        return _gates.setdefault(tag, threading.Event())


def release_all() -> None:
    """Open every gate, so nothing a finished test held waits out its bound."""
    with _lock:
        gates = list(_gates.values())
    for event in gates:
        event.set()


def barrier(tag: str, parties: int = 2) -> threading.Barrier:
    with _lock:
        return _barriers.setdefault(tag, threading.Barrier(parties, timeout=5))


def secrets_seen(tag: str) -> dict[str, str] | None:
    with _lock:
        return _secrets_seen.get(tag)


# Environments.

PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

MATH_TASKS: dict[str, list[dict[str, Any]]] = {
    "train": [
        {"question": "What is 2+2?", "answer": "4"},
        {"question": "What is 3*3?", "answer": "9"},
        {"question": "What is 5+5?", "answer": "10"},
        {"question": "What is 9-1?", "answer": "8"},
        {"question": "What is 6/2?", "answer": "3"},
    ],
    "test": [{"question": "What is 7-2?", "answer": "5"}],
}


def math_task(index: int = 0, tag: str | None = None, split: str = "train") -> dict[str, Any]:
    """A MathLike task spec, tagged so the test can read what happened to its session."""
    task = dict(MATH_TASKS[split][index])
    if tag is not None:
        task["tag"] = tag
    return task


class Recording(Environment):
    """Journals its construction, secrets, setup and teardown under the task spec's `tag`."""

    def __init__(self, task_spec: dict[str, Any] | None = None, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets)
        self.tag = str(self.task_spec.get("tag", ""))
        with _lock:
            _secrets_seen[self.tag] = dict(self.secrets)
        record(self.tag, "init")

    def setup(self) -> None:
        record(self.tag, "setup")

    def teardown(self) -> None:
        record(self.tag, "teardown")


class SubmitInput(BaseModel):
    answer: str


class EchoInput(BaseModel):
    text: str


class SleepInput(BaseModel):
    seconds: float


class CountInput(BaseModel):
    steps: int = 5
    pause: float = 0.0
    gated: bool = False


class MathLike(Recording):
    """The default environment: a math task with a grading tool and tools that exercise the call pipeline."""

    @classmethod
    def list_splits(cls) -> list[str | Split]:
        return ["train", Split(name="test", type="test")]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [dict(task) for task in MATH_TASKS[split]]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=self.task_spec["question"])]

    @tool
    def submit(self, params: SubmitInput) -> ToolOutput:
        """Submit your answer to the math problem"""
        record(self.tag, "submit")
        correct = params.answer.strip() == self.task_spec["answer"]
        return ToolOutput(
            blocks=[TextBlock(text="Correct!" if correct else "Wrong")],
            reward=1.0 if correct else 0.0,
            finished=True,
        )

    @tool
    def noargs(self) -> ToolOutput:
        """Answer pong; takes no arguments."""
        record(self.tag, "noargs")
        return ToolOutput(blocks=[TextBlock(text="pong")], reward=0.0)

    @tool
    async def echo(self, params: EchoInput) -> ToolOutput:
        """Return the given text unchanged."""
        record(self.tag, "echo")
        return ToolOutput(blocks=[TextBlock(text=params.text)], metadata={"length": len(params.text)})

    @tool
    def picture(self) -> ToolOutput:
        """Return a one-pixel image."""
        return ToolOutput(blocks=[ImageBlock(data=PNG_1X1, mimeType="image/png")], reward=0.5)

    @tool
    def wait(self) -> ToolOutput:
        """Block until the test opens this session's gate."""
        record(self.tag, "wait-start")
        opened = gate(self.tag).wait(GATE_TIMEOUT)
        record(self.tag, "wait-end")
        return ToolOutput(blocks=[TextBlock(text="waited" if opened else "gate timed out")], reward=0.25)

    @tool
    async def sleep(self, params: SleepInput) -> ToolOutput:
        """Sleep for the given number of seconds."""
        record(self.tag, "sleep-start")
        await anyio.sleep(params.seconds)
        record(self.tag, "sleep-end")
        return ToolOutput(blocks=[TextBlock(text="slept")], reward=0.0)

    @tool
    def count(self, params: CountInput) -> ToolOutput:
        """Report `steps` progress steps, `pause` seconds apart; `gated`: the last one waits for this session's
        gate (so the call streams, and the test sees the reports before the end)."""
        for done in range(1, params.steps + 1):
            time.sleep(params.pause)
            if params.gated and done == params.steps:
                gate(self.tag).wait(GATE_TIMEOUT)
            self.report_progress(done, params.steps, f"step {done}")
        return ToolOutput(blocks=[TextBlock(text=f"counted {params.steps}")], reward=1.0)

    @tool
    def rendezvous(self) -> ToolOutput:
        """Return once another session with the same tag calls this tool too (proves they run concurrently)."""
        barrier(self.tag).wait()
        return ToolOutput(blocks=[TextBlock(text="met")])

    @tool
    def boom(self) -> ToolOutput:
        """Raise an exception."""
        record(self.tag, "boom")
        raise RuntimeError("kaboom")

    @tool
    def leak(self) -> ToolOutput:
        """Raise an exception whose message carries every secret value of the session."""
        raise RuntimeError("cannot log in with " + " and ".join(self.secrets.values()))

    @tool
    def not_output(self) -> ToolOutput:
        """Return something that is not a ToolOutput."""
        return "not a ToolOutput"  # type: ignore[return-value]


class OtherEnv(Recording):
    """A second environment: lazy tasks (no `list_tasks`), a plain-named split and an image in the prompt."""

    @classmethod
    def list_splits(cls) -> list[str | Split]:
        return ["train", "dev"]

    @classmethod
    def num_tasks(cls, split: str) -> int:
        return {"train": 2, "dev": 1}[split]

    @classmethod
    def get_task(cls, split: str, index: int) -> dict[str, Any]:
        if not 0 <= index < cls.num_tasks(split):
            raise IndexError(index)
        return {"start": index}

    def setup(self) -> None:
        super().setup()
        self.counter = int(self.task_spec.get("start", 0))

    def get_prompt(self) -> list[TextBlock | ImageBlock]:
        return [TextBlock(text="Count up."), ImageBlock(data=PNG_1X1, mimeType="image/png")]

    @tool
    def increment(self) -> ToolOutput:
        """Add one to the counter."""
        record(self.tag, "increment")
        self.counter += 1
        return ToolOutput(blocks=[TextBlock(text=str(self.counter))], reward=1.0)


class SingleTask(Environment):
    """One split with one empty task: for environments whose subject is their lifecycle or tools, not their tasks."""

    @classmethod
    def list_splits(cls) -> list[str | Split]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{}]


class OneTask(SingleTask, Recording):
    """A `SingleTask` that journals its lifecycle (see `Recording`)."""


class FailingSetup(OneTask):
    """`setup()` raises; the message carries the `TOKEN` secret when there is one (it must be redacted)."""

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="unreachable")]

    def setup(self) -> None:
        super().setup()
        token = self.secrets.get("TOKEN")
        raise ValueError("setup exploded" + (f" with token {token}" if token else ""))

    @tool
    def noop(self) -> ToolOutput:
        """Do nothing."""
        record(self.tag, "noop")
        return ToolOutput(blocks=[TextBlock(text="noop")])


class SlowSetup(OneTask):
    """`setup()` blocks until the test opens the session's gate."""

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="ready now")]

    def setup(self) -> None:
        super().setup()
        gate(self.tag).wait(GATE_TIMEOUT)
        record(self.tag, "setup-done")

    @tool
    def noop(self) -> ToolOutput:
        """Do nothing."""
        record(self.tag, "noop")
        return ToolOutput(blocks=[TextBlock(text="noop")])


ENVS: list[type[Environment]] = [MathLike, OtherEnv, FailingSetup, SlowSetup]
"""Served in this order: `mathlike` is the default environment."""

FAST = {
    "sse_keepalive": 0.2,
    "call_linger": 1.0,
    "ready_wait": 0.5,
    "shutdown_grace": 1.0,
    "teardown_timeout": 5.0,
}
"""Settings that make time-driven behaviour observable within a test's budget."""


# A live server.


@dataclass
class Live:
    url: str
    app: Any
    client: httpx.Client

    @property
    def store(self) -> Any:
        return self.app.state.store


@contextmanager
def live_server(
    envs: list[type[Environment]] | None = None, log_level: str = "warning", **settings: Any
) -> Iterator[Live]:
    """A real uvicorn server for `envs` (default: ENVS) with FAST settings overridden by `settings`."""
    from ors_server.http.app import create_app
    from ors_server.settings import Settings
    from tests.serving import serve

    app = create_app(envs or ENVS, Settings(**{**FAST, **settings}))
    with serve(app, log_level=log_level) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield Live(url, app, client)


def create(client: httpx.Client, task_spec: dict[str, Any] | None = None, **body: Any) -> str:
    """Create a session (a fresh sid unless `sid=` is given) and return its id; asserts success."""
    sid = body.pop("sid", None) or f"test-{uuid.uuid4().hex}"
    headers = body.pop("headers", {})
    if task_spec is not None:
        body["task_spec"] = task_spec
    elif "split" not in body:
        body["task_spec"] = math_task()
    response = client.post("/create", json=body, headers={"X-Session-ID": sid, **headers})
    assert response.status_code == 200, response.text
    assert response.json() == {"sid": sid}
    return sid


def sid_header(sid: str) -> dict[str, str]:
    return {"X-Session-ID": sid}


def x_secrets(secrets: dict[str, str], allowed_domains: bool = True) -> str:
    """The `X-Secrets` header value the `openreward` client sends (`ors-sdk` omits `allowed_domains`)."""
    entries = {
        k: ({"value": v, "allowed_domains": ["example.com"]} if allowed_domains else {"value": v})
        for k, v in secrets.items()
    }
    return base64.b64encode(json.dumps(entries).encode()).decode()


# SSE on the wire.


@dataclass
class Event:
    name: str
    """The `event:` field, or ':' for a comment."""
    data: str


def parse_sse(raw: bytes) -> list[Event]:
    """Parse an SSE stream strictly: CRLF line endings only, every event closed by a blank line."""
    text = raw.decode("utf-8")
    assert "\n" not in text.replace("\r\n", ""), f"bare LF in the stream: {text!r}"
    assert "\r" not in text.replace("\r\n", ""), f"bare CR in the stream: {text!r}"
    assert text.endswith("\r\n\r\n"), f"the stream does not end on an event boundary: {text[-200:]!r}"
    events: list[Event] = []
    for block in text.split("\r\n\r\n")[:-1]:
        lines = block.split("\r\n")
        if all(line.startswith(":") for line in lines):
            events.extend(Event(":", line[1:].removeprefix(" ")) for line in lines)
            continue
        name, data = None, []
        for line in lines:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                assert name is None, f"two event fields in {block!r}"
                name = value
            elif field == "data":
                data.append(value)
            else:
                raise AssertionError(f"unexpected SSE line {line!r} in {block!r}")
        assert name is not None, f"an event without a name: {block!r}"
        events.append(Event(name, "\n".join(data)))
    return events


def without_comments(events: list[Event]) -> list[Event]:
    return [e for e in events if e.name != ":"]


def client_join(events: list[Event]) -> str:
    """The result text as the `openreward` client rebuilds it: chunk and end data, each `lstrip()`ped."""
    return "".join(e.data.lstrip() for e in events if e.name in ("chunk", "end"))


def call_result(events: list[Event]) -> dict[str, Any]:
    """The tool result of a complete `/call` stream; asserts `task_id`, `chunk`*, `end` in that order."""
    names = [e.name for e in without_comments(events)]
    assert names[0] == "task_id" and names[-1] == "end", names
    assert set(names[1:-1]) <= {"chunk"}, names
    joined = "".join(e.data for e in events if e.name in ("chunk", "end"))
    return json.loads(joined)


def post_sse(
    client: httpx.Client, path: str, body: Any, sid: str | None, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, bytes]:
    """POST and read the whole response as raw bytes (an SSE stream, or a JSON error)."""
    all_headers = {"Accept": "text/event-stream", **(headers or {})}
    if sid is not None:
        all_headers["X-Session-ID"] = sid
    with client.stream("POST", path, json=body, headers=all_headers) as response:
        raw = b"".join(response.iter_raw())
    return response, raw


def call(client: httpx.Client, sid: str, name: str, arguments: Any = None, path: str = "/mathlike/call") -> list[Event]:
    """Call a tool and return the parsed stream; asserts the 200 text/event-stream answer."""
    body = {"name": name, "input": arguments if arguments is not None else {}}
    response, raw = post_sse(client, path, body, sid)
    assert response.status_code == 200, raw
    assert response.headers["content-type"].startswith("text/event-stream"), response.headers
    return parse_sse(raw)


class SlowTeardown(OneTask):
    """`teardown()` blocks until the test opens the gate named `<tag>-teardown`."""

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="tear me down slowly")]

    def teardown(self) -> None:
        record(self.tag, "teardown-start")
        gate(self.tag + "-teardown").wait(GATE_TIMEOUT)
        super().teardown()

    @tool
    def noop(self) -> ToolOutput:
        """Do nothing."""
        return ToolOutput(blocks=[TextBlock(text="noop")])


class Seeded(OneTask):
    """Journals every `task_from_seed` under the config's `tag`; the task carries the tag and the seed."""

    @classmethod
    def task_from_seed(cls, seed: int | None, config: dict[str, Any]) -> dict[str, Any]:
        record(config["tag"], f"task_from_seed {seed}")
        return {"tag": config["tag"], "seed": seed}

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"seed {self.task_spec.get('seed')}")]

    @tool
    def noop(self) -> ToolOutput:
        """Do nothing."""
        return ToolOutput(blocks=[TextBlock(text="noop")])


class ProcessProbe(OneTask):
    """Reports on the server process it runs in, for tests of what a server process does at startup."""

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="probe the process")]

    @tool
    def frozen_objects(self) -> ToolOutput:
        """How many objects the garbage collector was told to leave alone (`gc.freeze`)."""
        import gc

        return ToolOutput(blocks=[TextBlock(text=str(gc.get_freeze_count()))])
