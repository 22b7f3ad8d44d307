"""The async client: one connection pool, bounded sessions, retries, keepalive pings, resumed streams."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import quote

import httpx

from ors_client import openai as oai
from ors_client.errors import (
    AuthError,
    ConnectionFailed,
    OrsError,
    Redirected,
    ResponseTooLarge,
    ServerFull,
    SessionExpired,
    SessionNotFound,
    StreamCut,
    ToolError,
)
from ors_client.sse import DEFAULT_MAX_EVENT_BYTES, Parser
from ors_client.transport import LeanTransport
from ors_client.types import EpisodeResult, ToolOutput

DEFAULT_KEEPALIVE = 60.0
"""Seconds between pings when the server does not say its idle timeout (the reference reaps after 900 s)."""
TIMEOUT_HEADER = "x-session-timeout"
"""Our server's idle timeout, sent on `/create`: the client pings at a third of it."""
CLIENT_IDS_HEADER = "x-client-session-ids"
"""Our server's word on `/create_session` that `/create` takes ids the client makes up."""
MAX_RESUMES = 3
"""How many times one call's cut stream is resumed by its `task_id` before the call fails."""
MAX_RETRY_AFTER = 30.0
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""The largest response body, and the largest result of one streamed call, the client reads by default."""
MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)

# Requests whose failure mid-flight may have had an effect: retried only when the connection never opened.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

Policy = Callable[["AsyncSession"], Awaitable[None]]


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        detail = response.text
    return detail if isinstance(detail, str) else json.dumps(detail)


def _error(response: httpx.Response, *, session: bool) -> OrsError:
    """The typed error for a non-2xx answer."""
    status, detail = response.status_code, _detail(response)
    if status in (401, 403):
        return AuthError(detail, status)
    if status == 503:
        return ServerFull(detail, status, _retry_after(response))
    if status == 404 and session:
        return SessionNotFound(detail, status)
    if status == 410:
        return SessionExpired(detail, status)
    return OrsError(detail, status)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return min(float(response.headers["retry-after"]), MAX_RETRY_AFTER)
    except (KeyError, ValueError):
        return None


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port or {"http": 80, "https": 443}.get(url.scheme)


def _too_large(response: httpx.Response, limit: int, how: str) -> ResponseTooLarge:
    return ResponseTooLarge(
        f"{response.request.method} {response.request.url.path}: the response body is larger than {limit} bytes "
        f"({how}; the client's max_body_bytes); the connection was closed",
        response.status_code,
    )


def _jitter(seconds: float) -> float:
    return seconds * random.uniform(0.5, 1.5)


async def _back_off(attempt: int) -> None:
    """Wait before retrying after a connection failed: 0.1 s doubling with each attempt, at most 5 s, jittered."""
    await _back_off(attempt)


class _FullServerWait:
    """One request's patience with a full server (503): it waits each `Retry-After`, jittered, for up to
    `wait_when_full` seconds since the first 503."""

    def __init__(self, wait_when_full: float) -> None:
        self.wait_when_full = wait_when_full
        self.since: float | None = None

    async def waited(self, response: httpx.Response) -> bool:
        """Sleep as the 503 asks and say True, or False (no sleep) when that would go past the patience."""
        self.since = self.since or time.monotonic()
        wait = _jitter(_retry_after(response) or 1.0)
        if time.monotonic() + wait - self.since > self.wait_when_full:
            return False
        await asyncio.sleep(wait)
        return True


def encode_secrets(secrets: dict[str, str]) -> str:
    """The `X-Secrets` header as the ORS reference server reads it: base64 of `{name: {"value": ...}}`."""
    payload = {name: {"value": value, "allowed_domains": []} for name, value in secrets.items()}
    return base64.b64encode(json.dumps(payload).encode()).decode()


def encode_labels(labels: dict[str, str]) -> str:
    """`X-Episode-Labels: key=value,...`, each side percent-encoded so `,` and `=` inside survive."""
    return ",".join(f"{quote(str(k), safe='')}={quote(str(v), safe='')}" for k, v in labels.items())


class AsyncClient:
    """An ORS server's environments, sessions and rollouts, over one pooled `httpx.AsyncClient`.

    `max_concurrency` bounds the sessions open at once: opening one more waits for a slot. A 503 (server full
    or busy) is retried after its `Retry-After`, jittered, for up to `wait_when_full` seconds; a connection
    error is retried `retries` times with jittered backoff when the request is safe to repeat. `keepalive`
    sets the ping period (default: a third of the idle timeout the server sends, else 60 s). `timeout` bounds
    connecting and each read (a streamed call's keepalives count as reads). `transport`: httpx's own
    (`httpx.AsyncHTTPTransport()`) for proxies or HTTP/2; by default a lean HTTP/1.1 one (`ors_client.transport`).

    What a server may make the client hold is bounded: `max_body_bytes` (64 MiB) for a response body and for the
    result of one tool call (all its stream's events), `max_event_bytes` (16 MiB) for one line or one event of a
    stream; past either the connection is closed and `ResponseTooLarge` raised. Redirects are followed on this
    client's origin only: one to another scheme, host or port raises `Redirected`, so the API key and secrets
    never leave for another server.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        max_concurrency: int = 256,
        keepalive: float | None = None,
        timeout: float = 60.0,
        retries: int = 5,
        wait_when_full: float = 300.0,
        transport: httpx.AsyncBaseTransport | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if max_body_bytes < 1 or max_event_bytes < 1:
            raise ValueError("max_body_bytes and max_event_bytes must be at least 1")
        self.max_body_bytes = max_body_bytes
        self.max_event_bytes = max_event_bytes
        self.base_url = base_url.rstrip("/")
        # Requests go straight to the transport: httpx.AsyncClient's per-request machinery (URL merging,
        # cookies, hooks) cost more client CPU than the transport itself in a profile of the call path.
        self._transport = transport or LeanTransport()
        self._headers = {"X-API-Key": api_key} if api_key else {}
        self._timeout = {"connect": timeout, "read": timeout, "write": timeout, "pool": None}
        self._urls: dict[str, httpx.URL] = {}
        self.max_concurrency = max_concurrency
        self.keepalive = keepalive
        self.retries = retries
        self.wait_when_full = wait_when_full
        self._slots = asyncio.Semaphore(max_concurrency)
        self._env_tools: dict[str, asyncio.Future[list[dict[str, Any]]]] = {}
        self._own_ids = False
        """The server said (on `/create_session`) that `/create` takes ids the client makes up."""

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._transport.aclose()

    # Requests.

    def _url(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(path if "://" in path else self.base_url + path)
        return url

    async def send(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None, *, stream: bool = False
    ) -> httpx.Response:
        """One exchange, without retries or status checks; the body read (at most `max_body_bytes`) unless a 200
        is asked for as a `stream`. A 3xx with a Location on the same origin is followed (the reference server
        redirects paths it does not route to its default environment); one to another origin raises `Redirected`:
        the request carries the API key and the secrets."""
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        all_headers = {**self._headers, **(headers or {})}
        if content is not None:
            all_headers["Content-Type"] = "application/json"
        url = self._url(path)
        for _ in range(MAX_REDIRECTS):
            request = httpx.Request(
                method, url, headers=all_headers, content=content, extensions={"timeout": self._timeout}
            )
            response = await self._transport.handle_async_request(request)
            if stream and response.status_code == 200:
                return response
            try:
                response = await self._read(response)
            finally:
                await response.aclose()
            location = response.headers.get("location")
            if response.status_code not in REDIRECTS or not location:
                return response
            target = url.join(location)
            if _origin(target) != _origin(url):
                raise Redirected(
                    f"{method} {path}: the server redirected to another origin ({target.scheme}://{target.host}"
                    f"{'' if target.port is None else f':{target.port}'}); not followed, so the API key and "
                    "secrets were not sent there",
                    response.status_code,
                )
            url = target
        return response

    async def _read(self, response: httpx.Response) -> httpx.Response:
        """`response` with its body read, or ResponseTooLarge past `max_body_bytes` (known from Content-Length
        before anything is read, else counted as the body arrives)."""
        limit = self.max_body_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and "content-encoding" not in response.headers:
            if int(declared) > limit:
                raise _too_large(response, limit, f"declared {declared} bytes")
            await response.aread()  # the transport delivers no more than the declared length
            return response
        parts: list[bytes] = []
        size = 0
        async for part in response.aiter_bytes():  # decoded: a compressed body is bounded by what it unpacks to
            size += len(part)
            if size > limit:
                raise _too_large(response, limit, "still sending")
            parts.append(part)
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "content-encoding"]
        return httpx.Response(response.status_code, headers=headers, content=b"".join(parts), request=response.request)

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
        idempotent: bool = True,
        session: bool = False,
    ) -> httpx.Response:
        """One request with the client's retries; returns a 2xx response or raises the typed error."""
        attempt = 0
        full = _FullServerWait(self.wait_when_full)
        while True:
            try:
                response = await self.send(method, path, json_body, headers)
            except httpx.TransportError as exc:
                if attempt >= self.retries or not (idempotent or isinstance(exc, _NOT_SENT)):
                    raise ConnectionFailed(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
                await _back_off(attempt)
                attempt += 1
                continue
            if response.status_code < 400:
                return response
            # A 503 did nothing: safe to repeat whatever the request.
            if response.status_code == 503 and await full.waited(response):
                continue
            raise _error(response, session=session)

    async def _get(self, path: str) -> Any:
        return (await self.request("GET", path)).json()

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        return (await self.request("POST", path, json_body=body)).json()

    # Discovery.

    async def environments(self) -> list[str]:
        return await self._get("/list_environments")

    async def tools(self, env: str) -> list[dict[str, Any]]:
        """The environment's tools: `{name, description, input_schema}` each."""
        return (await self._get(f"/{quote(env)}/tools"))["tools"]

    async def splits(self, env: str) -> list[dict[str, Any]]:
        return await self._get(f"/{quote(env)}/splits")

    async def tasks(self, env: str, split: str = "train") -> list[dict[str, Any]]:
        return (await self._post(f"/{quote(env)}/tasks", {"split": split}))["tasks"]

    async def num_tasks(self, env: str, split: str = "train") -> int:
        return (await self._post(f"/{quote(env)}/num_tasks", {"split": split}))["num_tasks"]

    async def task(self, env: str, split: str, index: int) -> dict[str, Any]:
        return (await self._post(f"/{quote(env)}/task", {"split": split, "index": index}))["task"]

    async def _tools_once(self, env: str) -> list[dict[str, Any]]:
        """The environment's tools, asked once per client (for `openai_tools()`, which does not wait)."""
        found = self._env_tools.get(env)
        if found is None or (found.done() and found.exception() is not None):
            found = self._env_tools[env] = asyncio.ensure_future(self.tools(env))
        return await asyncio.shield(found)

    # Sessions.

    def session(
        self,
        env: str,
        task: dict[str, Any] | None = None,
        *,
        split: str | None = None,
        index: int | None = None,
        secrets: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        keepalive: float | None = None,
    ) -> AsyncSession:
        """One episode, opened by `async with` (which waits for a free slot) and deleted when the block ends.
        Give the task as a spec (`task=`) or by `split=` and `index=`."""
        if (task is None) == (split is None or index is None):
            raise ValueError("give either task= or both split= and index=")
        return AsyncSession(self, env, task, split, index, secrets, labels, keepalive)

    async def group(
        self,
        env: str,
        task: dict[str, Any] | None = None,
        n: int = 8,
        *,
        split: str | None = None,
        index: int | None = None,
        secrets: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> Group:
        """`n` sessions on one task, open (GRPO-style). Each is an async context manager that deletes it, and
        so is the group (deleting all)."""
        if n > self.max_concurrency:
            raise ValueError(f"a group of {n} needs max_concurrency >= {n} (it is {self.max_concurrency})")
        sessions = [self.session(env, task, split=split, index=index, secrets=secrets, labels=labels) for _ in range(n)]
        opened = await asyncio.gather(*(s.open() for s in sessions), return_exceptions=True)
        failure = next((r for r in opened if isinstance(r, BaseException)), None)
        if failure is not None:
            await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
            raise failure
        return Group(sessions)

    # Rollouts.

    async def rollouts(
        self,
        env: str,
        tasks: Iterable[dict[str, Any]],
        policy: Policy,
        *,
        n: int = 1,
        concurrency: int | None = None,
        secrets: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        progress: Callable[[int, int], None] | bool | None = None,
    ) -> list[EpisodeResult]:
        """Run `await policy(session)` `n` times per task, `concurrency` episodes at once (at most
        `max_concurrency`). One episode's failure is its result's `error`; the others go on. Results come in
        task order, the `n` samples of a task together.

        Progress: a callback `progress(done, total)`; by default a tqdm bar when tqdm is installed; `False` for
        none."""
        jobs = [(i, task, k) for i, task in enumerate(tasks) for k in range(n)]
        results: list[EpisodeResult | None] = [None] * len(jobs)
        report = _progress(progress, len(jobs))
        width = max(1, min(concurrency or self.max_concurrency, self.max_concurrency, len(jobs) or 1))
        queue = iter(range(len(jobs)))
        done = 0

        async def worker() -> None:
            nonlocal done
            for job in queue:
                index, task, sample = jobs[job]
                results[job] = await self._episode(env, task, index, sample, policy, secrets, labels)
                done += 1
                report(done)

        workers = [asyncio.ensure_future(worker()) for _ in range(width)]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            report(None)
        return [r for r in results if r is not None]

    async def _episode(
        self,
        env: str,
        task: dict[str, Any],
        index: int,
        sample: int,
        policy: Policy,
        secrets: dict[str, str] | None,
        labels: dict[str, str] | None,
    ) -> EpisodeResult:
        started = time.monotonic()
        session = self.session(env, task, secrets=secrets, labels=labels)
        error = None
        try:
            async with session:
                await policy(session)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        return EpisodeResult(
            env=env,
            task=task,
            task_index=index,
            sample=sample,
            reward=session.reward,
            steps=session.steps,
            finished=session.finished,
            duration=time.monotonic() - started,
            error=error,
            labels=dict(labels or {}),
        )


def _progress(progress: Callable[[int, int], None] | bool | None, total: int) -> Callable[[int | None], None]:
    """`report(done)` after each episode and `report(None)` at the end."""
    if callable(progress):
        return lambda done: None if done is None else progress(done, total)
    if progress is None or progress is True:
        try:
            from tqdm.auto import tqdm  # type: ignore[import-untyped]
        except ImportError:
            return lambda done: None
        bar = tqdm(total=total, unit="episode")
        return lambda done: bar.close() if done is None else bar.update(1)
    return lambda done: None


class Group(list["AsyncSession"]):
    """The open sessions of `AsyncClient.group`; `async with group:` deletes them all at the end."""

    async def __aenter__(self) -> Group:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.gather(*(s.close() for s in self), return_exceptions=True)


class AsyncSession:
    """One episode on the server. Track record: `reward` (sum), `steps`, `finished`, and `messages()`."""

    def __init__(
        self,
        client: AsyncClient,
        env: str,
        task: dict[str, Any] | None,
        split: str | None,
        index: int | None,
        secrets: dict[str, str] | None,
        labels: dict[str, str] | None,
        keepalive: float | None,
    ) -> None:
        self.client = client
        self.env = env
        self.task = task
        self.split, self.index = split, index
        self.labels = dict(labels or {})
        self._secrets = secrets
        self._keepalive = keepalive if keepalive is not None else client.keepalive
        self.id: str | None = None
        self.reward = 0.0
        self.steps = 0
        self.finished = False
        self.idle_timeout: float | None = None
        """The server's idle timeout for this session, when it said (our server does, on `/create`)."""
        self._path = f"/{quote(env)}"
        self._headers: dict[str, str] = {}
        self._slot = False
        self._closed = False
        self._last_used = time.monotonic()
        self._pinger: asyncio.Task[None] | None = None
        self._tools: list[dict[str, Any]] | None = None
        self._env_tools: list[dict[str, Any]] = []
        self._prompt: list[dict[str, Any]] | None = None
        self._messages: list[dict[str, Any]] = []

    async def __aenter__(self) -> AsyncSession:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # Opening and closing.

    async def open(self) -> None:
        """Wait for a slot, then create the session on the server (a no-op when already open)."""
        if self.id is not None:
            return
        await self.client._slots.acquire()
        self._slot = True
        try:
            sid = await self._new_id()
            await self._create(sid)
            self.id = sid
            self._headers = {"X-Session-ID": sid}
            self._env_tools = await self.client._tools_once(self.env)
        except BaseException:
            await self.close()
            raise
        self._last_used = time.monotonic()
        self._pinger = asyncio.ensure_future(self._keep_alive())

    async def _new_id(self) -> str:
        if self.client._own_ids:
            return str(uuid.uuid4())
        # SSE is what every ORS server answers (the reference only that); our server also answers JSON.
        response = await self.client.request("POST", "/create_session", headers={"Accept": "text/event-stream"})
        # A server that says so takes ids the client makes: the next sessions save this round trip.
        self.client._own_ids = response.headers.get(CLIENT_IDS_HEADER) == "accepted"
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()["sid"]
        for event in Parser(self.client.max_event_bytes).feed(response.content + b"\n\n"):
            if event.event == "task_id":
                return event.data
        raise OrsError(f"/create_session answered no session id: {response.text[:200]!r}")

    async def _create(self, sid: str) -> None:
        body: dict[str, Any] = {"env_name": self.env}
        if self.task is not None:
            body["task_spec"] = self.task
        else:
            body["split"], body["index"] = self.split, self.index
        headers = {"X-Session-ID": sid}
        if self._secrets:
            headers["X-Secrets"] = encode_secrets(self._secrets)
        if self.labels:
            headers["X-Episode-Labels"] = encode_labels(self.labels)
        # Retrying /create with the same id cannot create two sessions: a repeat of one that went through is
        # refused as "Session already exists", which then means it was ours.
        attempt, repeated = 0, False
        full = _FullServerWait(self.client.wait_when_full)
        while True:
            try:
                response = await self.client.send("POST", "/create", body, headers)
            except httpx.TransportError as exc:
                if attempt >= self.client.retries:
                    raise ConnectionFailed(f"POST /create: {type(exc).__name__}: {exc}") from exc
                repeated = repeated or not isinstance(exc, _NOT_SENT)
                await _back_off(attempt)
                attempt += 1
                continue
            if response.status_code < 400:
                break
            if repeated and response.status_code == 400 and "already exists" in _detail(response):
                break
            if response.status_code == 503 and await full.waited(response):
                continue
            raise _error(response, session=False)
        try:
            self.idle_timeout = float(response.headers[TIMEOUT_HEADER])
        except (KeyError, ValueError):
            self.idle_timeout = None

    async def close(self) -> None:
        """Delete the session on the server (once; also when the caller is being cancelled) and free its slot."""
        if self._closed:
            return
        self._closed = True
        if self._pinger is not None:
            self._pinger.cancel()
        try:
            if self.id is not None:
                # Shielded: a cancelled caller still deletes what it created, so the server does not wait for
                # the reaper.
                await asyncio.shield(self._delete())
        finally:
            if self._slot:
                self._slot = False
                self.client._slots.release()

    async def _delete(self) -> None:
        try:
            await self.client.request("POST", "/delete", headers=self._headers, session=True)
        except OrsError:
            pass  # gone already, or the server is: either way nothing is left to delete

    def _ping_period(self) -> float:
        if self._keepalive is not None:
            return self._keepalive
        if self.idle_timeout is not None:
            return self.idle_timeout / 3
        return DEFAULT_KEEPALIVE

    async def _keep_alive(self) -> None:
        """Ping whenever the session has been quiet for a ping period (any request refreshes the server's timer)."""
        period = self._ping_period()
        while True:
            due = self._last_used + period - time.monotonic()
            if due > 0:
                await asyncio.sleep(due)
                continue
            try:
                await self.ping()
            except (SessionNotFound, SessionExpired, AuthError):
                return  # the session is gone: the next call says so
            except OrsError:
                self._last_used = time.monotonic()  # a transient failure: try again a period later

    # The episode.

    def _check_open(self) -> None:
        if self.id is None or self._closed:
            raise OrsError("the session is not open: use it inside `async with` (or after `await s.open()`)")

    async def ping(self) -> None:
        self._check_open()
        self._last_used = time.monotonic()
        await self.client.request("POST", "/ping", headers=self._headers, session=True)

    async def prompt(self) -> list[dict[str, Any]]:
        """The episode's opening blocks (asked once; later calls return the same list)."""
        if self._prompt is None:
            self._check_open()
            self._last_used = time.monotonic()
            response = await self.client.request("GET", f"{self._path}/prompt", headers=self._headers, session=True)
            self._prompt = response.json()
            self._messages.insert(0, oai.user_message(self._prompt))
        return self._prompt

    async def tools(self) -> list[dict[str, Any]]:
        """This session's tools, with any task-specific ones (asked once)."""
        if self._tools is None:
            self._check_open()
            self._last_used = time.monotonic()
            path = f"{self._path}/task_tools"
            self._tools = (await self.client.request("GET", path, headers=self._headers, session=True)).json()["tools"]
        return self._tools

    def openai_tools(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function-calling schemas: the session's own once `await s.tools()` has run,
        else the environment's (fetched when the first session of the environment opened)."""
        return [oai.function_tool(t) for t in (self._tools if self._tools is not None else self._env_tools)]

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> ToolOutput:
        """Call a tool. A refused call (unknown tool, bad input, finished episode) returns `ok=False`; a tool
        that raises raises `ToolError`."""
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        self._messages.append(oai.assistant_call(call_id, name, json.dumps(arguments or {})))
        output = await self._call(name, arguments or {})
        self._messages.append(oai.tool_message(call_id, output))
        return output

    async def call_openai(self, tool_call: Any) -> dict[str, Any]:
        """Run an assistant's tool call (a dict or an OpenAI SDK object); return the tool message to append.
        Arguments that are not a JSON object come back to the model as an error message, not an exception."""
        call_id, name, arguments = oai.read_tool_call(tool_call)
        self._messages.append(oai.assistant_call(call_id, name, arguments))
        parsed = oai.parse_arguments(arguments)
        if isinstance(parsed, str):
            output = ToolOutput(ok=False, error=parsed, reason="input_validation")
        else:
            output = await self._call(name, parsed)
        message = oai.tool_message(call_id, output)
        self._messages.append(message)
        return message

    def messages(self) -> list[dict[str, Any]]:
        """The episode so far as OpenAI chat messages: the prompt (once asked), then each call and its result."""
        return [dict(m) for m in self._messages]

    async def _call(self, name: str, arguments: dict[str, Any]) -> ToolOutput:
        self._check_open()
        self.steps += 1
        result = await self._run_call({"name": name, "input": arguments})
        output = ToolOutput.from_wire(result)
        if output.reward is not None:
            self.reward += output.reward
        self.finished = self.finished or output.finished
        return output

    async def _run_call(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /call and read its events; a stream cut after `task_id` is resumed by re-posting the id."""
        headers = {**self._headers, "Accept": "text/event-stream"}
        path = f"{self._path}/call"
        task_id: str | None = None
        resumes = attempt = 0
        full = _FullServerWait(self.client.wait_when_full)
        why = ""
        while True:
            self._last_used = time.monotonic()
            try:
                response = await self.client.send("POST", path, body, headers, stream=True)
            except httpx.TransportError as exc:
                # Before a task_id, only a connection that never opened proves the call did not start.
                if (task_id is None and not isinstance(exc, _NOT_SENT)) or attempt >= self.client.retries:
                    raise ConnectionFailed(f"POST {path}: {type(exc).__name__}: {exc}") from exc
                await _back_off(attempt)
                attempt += 1
                continue
            try:
                if response.status_code != 200:
                    if response.status_code == 503 and task_id is None and await full.waited(response):
                        continue
                    raise _error(response, session=True)
                parser = Parser(self.client.max_event_bytes)
                parts: list[str] = []
                size = 0
                try:
                    async for chunk in response.aiter_raw():
                        for event in parser.feed(chunk):
                            if event.event == "task_id":
                                task_id = event.data
                            elif event.event == "chunk":
                                size += len(event.data)
                                if size > self.client.max_body_bytes:
                                    raise ResponseTooLarge(
                                        f"POST {path}: the call's result is longer than {self.client.max_body_bytes} "
                                        "characters (the client's max_body_bytes); the stream was closed"
                                    )
                                parts.append(event.data)
                            elif event.event == "end":
                                parts.append(event.data)
                                return json.loads("".join(parts))
                            elif event.event == "error":
                                if event.data == "unknown task_id" and "task_id" in body:
                                    raise StreamCut(
                                        f"the stream of call {task_id} was cut and the server cannot resume it"
                                    )
                                raise ToolError(event.data)
                    why = "the stream ended before the result"
                except httpx.TransportError as exc:
                    why = f"the stream broke ({type(exc).__name__}: {exc})"
            finally:
                await response.aclose()
            self._last_used = time.monotonic()
            if task_id is None:
                raise StreamCut(f"POST {path}: {why}, before the call's task_id (nothing to resume by)")
            if resumes >= MAX_RESUMES:
                raise StreamCut(f"POST {path}: {why}; resumed {resumes} times by task_id {task_id} without a result")
            resumes += 1
            body = {**body, "task_id": task_id}
