"""The front: one address for a deployment, routing every request to the worker that holds its session.

New sessions go to the worker with the most room (the workers report their load on every reply); the front
remembers where it put each one in a bounded directory, and asks the workers about an id it does not know
(`lookup`), so several fronts can serve one deployment and any front can lose its memory. Bodies are
forwarded byte for byte and the client's `Host` is kept (the MCP face's DNS-rebinding check reads it);
streamed replies (SSE) are passed on chunk by chunk with no read timeout, and a WebSocket is bridged frame by
frame to the worker chosen at the upgrade. What the front answers itself, it answers as one server would, in
the face's own error shape: 410 for a session whose worker is gone, 503 with Retry-After when no worker can
take a request now.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httptools
import websockets
from starlette.types import Receive, Scope, Send
from websockets.asyncio.client import ClientConnection

from ors_server.http.env_ports import relayed_headers
from ors_server.http.guards import HeaderChecks, refuse_websocket
from ors_server.http.lookup import KEY_HEADER, LOAD_HEADER, LOOKUP_PATH, parse_load
from ors_server.ids import WorkerTag, split
from ors_server.scale import metrics as merged
from ors_server.scale.directory import DEFAULT_SIZE, Directory
from ors_server.scale.refusals import Refusals
from ors_server.scale.table import Lost, State, Unavailable, Worker, WorkerTable
from ors_server.scale.upstream import Upstream, WorkerUnreachable, probe

logger = logging.getLogger("ors_server.front")

SCRAPE_TIMEOUT = 5.0
UPSTREAM_CLOSE_TIMEOUT = 5.0
"""Seconds the closing handshake with a worker may take once the client's socket is done; then it is aborted."""
SENDABLE_CLOSE_CODES = frozenset(range(1000, 1004)) | frozenset(range(1007, 1012)) | frozenset(range(3000, 5000))
"""Close codes a close frame may carry (RFC 6455 7.4): 1005, 1006 and 1015 only report what happened."""
LOOKUP_TIMEOUT = 5.0
# What a lookup takes from its request: the Host and every way of giving the key (the web page's is its cookie).
LOOKUP_HEADERS = frozenset({b"host", b"authorization", b"x-api-key", b"cookie"})
WS_HEADERS_NOT_FORWARDED = frozenset(
    {"host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions"}
    | {"sec-websocket-protocol", "content-length", "transfer-encoding"}
)


class _TooLarge(Exception):
    pass


class _ClientGone(Exception):
    pass


class Front:
    """The front's ASGI app over a worker table that someone else keeps current (a supervisor or Ray)."""

    def __init__(
        self,
        table: WorkerTable,
        refusals: Refusals,
        *,
        checks: HeaderChecks,
        max_body_bytes: int,
        lifespan: Callable[[], AbstractAsyncContextManager[Any]] | None = None,
        on_unreachable: Callable[[Worker], None] | None = None,
        name: str = "0",
        directory_size: int = DEFAULT_SIZE,
        on_placed: Callable[[str, WorkerTag], None] | None = None,
        on_revoked: Callable[[bytes], None] | None = None,
        port_envs: dict[int, str] | None = None,
    ) -> None:
        self.table = table
        self.directory = Directory(directory_size)
        self.on_placed = on_placed  # told of each session this front placed (`--fronts M`: the other fronts)
        self.on_revoked = on_revoked  # told of each credential an answer through this front revoked (the same)
        self.name = name  # which front of the deployment this is (`--fronts M`: 0..M-1)
        self.refusals = refusals
        self.checks = checks
        self.max_body_bytes = max_body_bytes
        self.lifespan = lifespan
        self.on_unreachable = on_unreachable
        self.upstreams: dict[Any, Upstream] = {}
        self._pruned_at = table.version
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self.port_envs = port_envs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.port_envs and scope["type"] != "lifespan":
            # The workers do not listen on the environments' ports: they learn the port's environment from us.
            scope["headers"] = relayed_headers(scope, self.port_envs)
        if scope["type"] == "http":
            await self.http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self.websocket(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    # Routing.

    async def _route(self, scope: Scope, key: str | None, creates: bool, tried: list[Worker]) -> tuple[Worker, bool]:
        """The worker for this request, and whether it was placed by load (True) rather than found holding `key`.

        A known id goes to the worker this front recorded for it; an unknown one is looked up (`_ask`). An id no
        live worker holds is placed by load when the request creates a session; otherwise any live worker answers
        it (its 404, in the face's shape), except that an id minted by a worker incarnation that is gone is 410.
        Hints in an id (a worker tag) only choose whom to ask first: they never place a session.
        Raises Lost (410) or Unavailable (503)."""
        if key is None:
            if creates:  # a session under an id its worker mints: placed by loads as of now
                live = [w for w in self.table.workers() if w.state is State.LIVE and w not in tried]
                await asyncio.gather(*(self._lookup(w, scope, None) for w in live))
            return self.table.place(tried), True
        tag = self.directory.get(key)
        if tag is not None:
            worker = self.table.current(tag)
            if worker is not None and worker not in tried:
                return worker, False
            if not creates:
                raise Lost(key)
            self.directory.drop(key)  # its worker is gone: a create with this id is a new session
        found = await self._ask(scope, key)
        if found is not None and found not in tried:
            self.directory.put(key, found.tag)
            return found, False
        if not creates:
            hinted = split(key)
            if hinted is not None and self.table.current(hinted[0]) is None:
                raise Lost(key)
        return self.table.place(tried), True

    async def _ask(self, scope: Scope, key: str) -> Worker | None:
        """The live (or draining) worker that holds `key` (live, else deleted), asked of the worker the id names
        first, if it names one, then of all the others at once; None when none holds it."""
        candidates = [w for w in self.table.workers() if w.state in (State.LIVE, State.DRAINING)]
        hinted = split(key)
        first = self.table.current(hinted[0]) if hinted is not None else None
        if first is not None and first in candidates:
            if await self._lookup(first, scope, key) is not None:
                return first
            candidates.remove(first)
        answers = await asyncio.gather(*(self._lookup(w, scope, key) for w in candidates))
        held = [(answer != "live", index) for index, answer in enumerate(answers) if answer is not None]
        return candidates[min(held)[1]] if held else None

    async def _lookup(self, worker: Worker, scope: Scope, key: str | None) -> str | None:
        """Whether `worker` holds `key` ('live' or 'deleted'), or None (also when it cannot say now); its load
        comes with the answer (with no key, only its load is asked for).

        Asked with the client's Host and API key, so a worker tells a client only what it would tell it directly.
        """
        headers = [(name, value) for name, value in scope["headers"] if name in LOOKUP_HEADERS]
        if key is not None:
            if not key.isascii() or len(key) > 1024:
                return None  # not an id any worker accepts: it answers the request itself (400)
            headers.append((KEY_HEADER, key.encode()))
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT):
                reply = await self._upstream(worker).request("GET", LOOKUP_PATH.encode(), headers, b"")
                try:
                    body = b"".join([chunk async for chunk in reply.body()])
                except BaseException:  # a timeout mid-body too: never leave the connection half read
                    reply.close()
                    raise
        except WorkerUnreachable:
            self.unreachable(worker)
            return None
        except (OSError, TimeoutError, httptools.HttpParserError):
            return None
        self._heard(worker, reply)
        if reply.status != 200:
            return None  # e.g. 401: the request itself gets the worker's refusal
        try:
            held = json.loads(body).get("held")
        except (ValueError, AttributeError):
            return None
        return held if held in ("live", "deleted") else None

    def _others(self, worker: Worker, tried: list[Worker]) -> bool:
        """Whether a live worker other than `worker` is left to try."""
        return any(w.live and w is not worker and w not in tried for w in self.table.workers())

    @staticmethod
    def _heard(worker: Worker, reply: Any) -> None:
        """Take the worker's load report off its reply (clients never see it) and keep it."""
        for name, value in reply.headers:
            if name == LOAD_HEADER:
                load = parse_load(value)
                if load is not None:
                    worker.report(*load)
                reply.headers = [(n, v) for n, v in reply.headers if n != LOAD_HEADER]
                return

    def _record(self, key: str | None, worker: Worker, reply: Any, alias_header: bytes | None) -> None:
        """After a session was created on `worker`: remember its id, and the other id its reply names it by (in
        the face's `alias_header`: an MCP transport id)."""
        keys = [key] if key is not None else []
        if alias_header is not None:
            alias = next((v for n, v in reply.headers if n == alias_header), None)
            if alias is not None:
                keys.append(alias.decode("latin-1"))
        for placed in keys:
            self.directory.put(placed, worker.tag)
            if self.on_placed is not None:
                self.on_placed(placed, worker.tag)

    def _upstream(self, worker: Worker) -> Upstream:
        if self.table.version != self._pruned_at:
            self._forget_gone()
        upstream = self.upstreams.get(worker.tag)
        if upstream is None or upstream.address != worker.address:
            upstream = self.upstreams[worker.tag] = Upstream(worker.address)
        return upstream

    def _forget_gone(self) -> None:
        """Close the pooled connections of workers that are dead or replaced (however the table learnt it), so a
        front does not keep idle sockets to every past incarnation."""
        self._pruned_at = self.table.version
        for tag in list(self.upstreams):
            current = self.table.slots[tag.index] if tag.index < self.table.size else None
            if current is None or current.tag != tag or current.state is State.DEAD:
                self.upstreams.pop(tag).close()

    def unreachable(self, worker: Worker) -> None:
        """Nothing answers at `worker`'s address: it is dead; its sessions answer 410 from now on."""
        if self.table.mark(worker.tag, State.DEAD):
            logger.warning("worker %s at %s is unreachable: marked dead", worker.tag, worker.address)
        upstream = self.upstreams.pop(worker.tag, None)
        if upstream is not None:
            upstream.close()
        if self.on_unreachable is not None:
            self.on_unreachable(worker)

    async def watch_health(self, period: float = 1.0, patience: float = 2.0, strikes: int = 3) -> None:
        """Probe every live worker's `/health` each `period`: nothing listening means dead at once; `strikes`
        probes in a row without an answer within `patience` mean dead too. This catches a silently lost node
        well before a cluster manager does (Ray declares a node dead after 15 s or more)."""
        misses: Counter[Any] = Counter()

        async def check(worker: Worker) -> None:
            try:
                await probe(worker.address, patience)
                misses.pop(worker.tag, None)
            except WorkerUnreachable:
                self.unreachable(worker)
            except (TimeoutError, OSError):
                misses[worker.tag] += 1
                if misses[worker.tag] >= strikes:
                    logger.warning("worker %s did not answer %d health checks", worker.tag, strikes)
                    self.unreachable(worker)

        while True:
            await asyncio.sleep(period)
            await asyncio.gather(*(check(worker) for worker in self.table.live()))

    # HTTP.

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.checks.refusal(scope)
        if refusal is not None:
            return await self.refusals.response(scope, refusal)(scope, receive, send)
        path = scope["path"]
        if path == "/health" and scope["method"] in ("GET", "HEAD"):
            return await self._health(scope, receive, send)
        if path == "/metrics" and scope["method"] == "GET":
            return await self._metrics(scope, receive, send)
        if path.startswith("/_ors/"):
            return await self.refusals.not_found(scope)(scope, receive, send)  # workers' lookups are for fronts
        try:
            body = await self._read_body(scope, receive)
        except _TooLarge:
            return await self.refusals.too_large(scope, self.max_body_bytes)(scope, receive, send)
        except _ClientGone:
            return
        # The request's face says which session it names and whether it may create one (`Face.names_session`).
        face = self.refusals.faces.of(scope)
        naming = face.names_session(scope, body)
        key, creates = naming.key, naming.creates
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        tried: list[Worker] = []
        for _ in range(self.table.size + 1):
            try:
                worker, placed = await self._route(scope, key, creates, tried)
            except Lost:
                self.outcomes["-", "lost"] += 1
                return await self.refusals.lost(scope)(scope, receive, send)
            except Unavailable:
                self.outcomes["-", "unavailable"] += 1
                return await self.refusals.busy(scope)(scope, receive, send)
            placing = placed and creates
            worker.in_flight += 1
            worker.placing += placing
            try:
                try:
                    reply = await self._upstream(worker).request(scope["method"], target, scope["headers"], body)
                except WorkerUnreachable:
                    # Nothing was sent to a live worker: a stateless request or a create goes to another one;
                    # another request for a session it held is now answered 410.
                    self.unreachable(worker)
                    tried.append(worker)
                    continue
                except (OSError, httptools.HttpParserError):
                    # The worker broke off or sent garbage before its reply began: as a proxy, 502.
                    self.outcomes[str(worker.tag.index), "bad_gateway"] += 1
                    bad = self.refusals.worker_failed(scope)
                    return await bad(scope, receive, send)
                self._heard(worker, reply)
                if reply.status == 401:  # a failed key check (a wrong key in a login form): counted here too
                    self.checks.failed(scope)
                elif (revoked := face.revokes(scope, reply.status)) is not None:
                    self._revoke(revoked)
                if placing and reply.status == 503 and worker.full and self._others(worker, tried):
                    # Full since this front last heard from it: the session goes to another live worker.
                    reply.close()
                    tried.append(worker)
                    continue
                if creates and reply.status < 400:
                    self._record(key, worker, reply, naming.alias_header)
                await self._relay(reply, receive, send)
                self.outcomes[str(worker.tag.index), "ok"] += 1
                return
            finally:
                worker.in_flight -= 1
                worker.placing -= placing
        self.outcomes["-", "unavailable"] += 1
        return await self.refusals.busy(scope)(scope, receive, send)

    def _revoke(self, cookie: bytes) -> None:
        """A credential a worker's answer revoked (`Face.revokes`) is refused here from now on and, through
        `on_revoked`, at the other fronts."""
        self.checks.revoke_cookie(cookie)
        if self.on_revoked is not None:
            self.on_revoked(cookie)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body_bytes:
                raise _TooLarge()
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _TooLarge()
            chunks.append(chunk)
            if not message.get("more_body"):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _relay(self, reply: Any, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": reply.status, "headers": reply.headers})
        if not reply.streaming:
            async for chunk in reply.body():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        # A stream (SSE) may stay open for long: stop reading it as soon as the client is gone.
        pump = asyncio.ensure_future(self._pump(reply, send))
        gone = asyncio.ensure_future(receive())
        try:
            await asyncio.wait([pump, gone], return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not pump.done():
                pump.cancel()
                reply.close()
            gone.cancel()
        if pump.done() and not pump.cancelled():
            pump.result()

    @staticmethod
    async def _pump(reply: Any, send: Send) -> None:
        try:
            async for chunk in reply.body():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except OSError:
            # The worker died mid-stream. Returning without the response's end makes the server close the client's
            # connection with the response incomplete (no last chunk), which every HTTP client reports as a
            # failure; a clean end would pass for a whole stream that merely lacks its `end` event. The openreward
            # client then asks again with its task_id and learns that the session is lost (410). An SSE `error`
            # event would read as the tool's own failure there, and not be asked again.
            logger.warning("a worker broke off a streamed reply: the client's connection is closed unfinished")
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # WebSockets.

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.checks.refusal(scope)
        if refusal is not None:
            return await refuse_websocket(scope, receive, send, refusal, self.refusals.response(scope, refusal))
        naming = self.refusals.faces.of(scope).names_session(scope, None)
        try:
            worker, _ = await self._route(scope, naming.key, naming.creates, [])
        except (Lost, Unavailable) as exc:
            await self._deny_ws(scope, send, 410 if isinstance(exc, Lost) else 503)
            return
        first = await receive()
        if first["type"] != "websocket.connect":
            return
        worker.in_flight += 1
        code: int | None = None
        placing = naming.creates  # the socket makes a session: count it as one until the worker has it
        worker.placing += placing
        try:
            try:
                upstream = await self._connect_ws(scope, worker)
            except websockets.InvalidStatus as refused:
                await self._relay_refusal(scope, send, refused)
                return
            except (OSError, TimeoutError, websockets.InvalidHandshake):
                self.unreachable(worker)
                await self._deny_ws(scope, send, 410 if naming.key else 503)
                return
            try:
                worker.placing -= placing
                placing = False
                await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
                code = await self._bridge(upstream, receive, send)
            finally:
                await self._close_upstream(upstream, code if code in SENDABLE_CLOSE_CODES else 1001)
        finally:
            worker.in_flight -= 1
            worker.placing -= placing

    @staticmethod
    async def _close_upstream(upstream: ClientConnection, code: int) -> None:
        """Close the socket to the worker, boundedly: `websockets` waits without a bound to hand its close frame
        to a worker that is not reading (its own replies backed up behind a client that stopped reading), and a
        front waiting there held the worker's socket, and so its session, for good."""
        try:
            async with asyncio.timeout(UPSTREAM_CLOSE_TIMEOUT):
                await upstream.close(code)
        except (TimeoutError, OSError, websockets.WebSocketException):
            pass
        finally:
            upstream.transport.abort()  # a no-op once the close completed

    async def _connect_ws(self, scope: Scope, worker: Worker) -> ClientConnection:
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope["headers"]
            if name.decode("latin-1").lower() not in WS_HEADERS_NOT_FORWARDED
        ]
        host = next((v.decode("latin-1") for n, v in scope["headers"] if n == b"host"), worker.address.authority)
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        # The URI carries the client's Host; the socket goes to the worker.
        uri = f"ws://{host}{target.decode('latin-1')}"
        options: dict[str, Any] = {
            "additional_headers": headers,
            "user_agent_header": None,
            "subprotocols": scope.get("subprotocols") or None,
            "compression": None,
            "max_size": None,
            "ping_interval": None,
            "open_timeout": 10,
        }
        if worker.address.uds:
            return await websockets.unix_connect(worker.address.uds, uri=uri, **options)
        return await websockets.connect(uri, host=worker.address.host, port=worker.address.port, proxy=None, **options)

    @staticmethod
    async def _bridge(upstream: ClientConnection, receive: Receive, send: Send) -> int | None:
        """Relay frames both ways until either side ends; returns the client's close code if the client ended."""
        closed_by_client: int | None = None

        async def client_to_worker() -> None:
            nonlocal closed_by_client
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    closed_by_client = message.get("code", 1000)
                    return
                text = message.get("text")
                await upstream.send(text if text is not None else message.get("bytes") or b"")

        async def worker_to_client() -> None:
            try:
                async for data in upstream:
                    if isinstance(data, str):
                        await send({"type": "websocket.send", "text": data})
                    else:
                        await send({"type": "websocket.send", "bytes": data})
            except websockets.ConnectionClosed:
                pass
            code = upstream.close_code or 1000
            await send({"type": "websocket.close", "code": code, "reason": upstream.close_reason or ""})

        tasks = [asyncio.ensure_future(client_to_worker()), asyncio.ensure_future(worker_to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return closed_by_client

    async def _deny_ws(self, scope: Scope, send: Send, status: int) -> None:
        if "websocket.http.response" in scope.get("extensions", {}):
            response = self.refusals.lost(scope) if status == 410 else self.refusals.busy(scope)
            start = {"type": "websocket.http.response.start", "status": status, "headers": response.raw_headers}
            await send(start)
            await send({"type": "websocket.http.response.body", "body": response.body})
        else:
            await send({"type": "websocket.close", "code": 1011 if status == 503 else 4410})

    @staticmethod
    async def _relay_refusal(scope: Scope, send: Send, refused: websockets.InvalidStatus) -> None:
        response = refused.response
        if "websocket.http.response" in scope.get("extensions", {}):
            body = response.body or b""
            headers = [
                (name.lower().encode("latin-1"), value.encode("latin-1"))
                for name, value in response.headers.raw_items()
                if name.lower() not in ("transfer-encoding", "connection", "content-length")
            ]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "websocket.http.response.start", "status": response.status_code, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008})

    # What the front answers itself.

    async def _fan_out(self, scope: Scope, path: bytes) -> dict[Worker, Any]:
        """GET `path` on every live worker at once, with the client's headers (its API key included)."""

        async def fetch(worker: Worker) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
            try:
                reply = await self._upstream(worker).request("GET", path, scope["headers"], b"")
                try:
                    chunks = [chunk async for chunk in reply.body()]
                except BaseException:  # SCRAPE_TIMEOUT mid-body too: close the connection, never leave it open
                    reply.close()
                    raise
            except WorkerUnreachable:
                self.unreachable(worker)
                return None
            except OSError:
                return None
            return reply.status, reply.headers, b"".join(chunks)

        workers = self.table.live()
        results = await asyncio.gather(
            *(asyncio.wait_for(fetch(w), SCRAPE_TIMEOUT) for w in workers), return_exceptions=True
        )
        return {w: r for w, r in zip(workers, results, strict=True) if isinstance(r, tuple)}

    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        answers = await self._fan_out(scope, b"/health")
        states = {
            str(w.tag.index): ("ok" if w in answers and answers[w][0] == 200 else "down") for w in self.table.workers()
        }
        for index in range(self.table.size):
            states.setdefault(str(index), "down")
        healthy = any(state == "ok" for state in states.values())
        body = json.dumps({"status": "ok" if healthy else "down", "workers": states}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200 if healthy else 503, "headers": headers})
        await send({"type": "http.response.body", "body": body if scope["method"] == "GET" else b""})

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        answers = await self._fan_out(scope, b"/metrics")
        refused = next((a for a in answers.values() if a[0] != 200), None)
        if refused is not None:  # e.g. 401 without the API key: the workers' own answer
            status, headers, body = refused
        else:
            scrapes = {str(w.tag.index): a[2].decode("utf-8", "replace") for w, a in answers.items()}
            body = merged.merge(scrapes, self._own_metrics()).encode()
            status, headers = 200, [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
            headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _own_metrics(self) -> str:
        # Several fronts may share the port: the front counters below are this front's own (the one that
        # accepted the scrape's connection), named by `ors_front_info`.
        lines = [
            "# HELP ors_front_info The front process that answered this scrape",
            "# TYPE ors_front_info gauge",
            f'ors_front_info{{front="{self.name}",pid="{os.getpid()}"}} 1',
            "# HELP ors_front_requests_total Requests the front routed, by worker and outcome",
            "# TYPE ors_front_requests_total counter",
        ]
        for (worker, outcome), count in sorted(self.outcomes.items()):
            lines.append(f'ors_front_requests_total{{worker="{worker}",outcome="{outcome}"}} {count}')
        lines += ["# HELP ors_front_workers Worker slots by state", "# TYPE ors_front_workers gauge"]
        states = Counter(w.state.value for w in self.table.workers())
        for state in ("starting", "live", "draining", "dead"):
            lines.append(f'ors_front_workers{{state="{state}"}} {states[state]}')
        return "\n".join(lines) + "\n"

    # Lifespan.

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        if self.lifespan is None:
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        context = self.lifespan()
        try:
            await context.__aenter__()
        except BaseException as exc:
            logger.exception("the front failed to start")
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        await send({"type": "lifespan.startup.complete"})
        await receive()
        try:
            await context.__aexit__(None, None, None)
        finally:
            for upstream in self.upstreams.values():
                upstream.close()
            await send({"type": "lifespan.shutdown.complete"})
