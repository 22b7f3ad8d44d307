"""Refusals before any face's handlers run: a duplicated Host or Origin, a stranger Host or Origin, the optional
API key, the body size limit (`ors_server.http.entry` makes them, in this order).

Each refusal is rendered by the face the request belongs to (its routes say which), in that face's shape. The
front of a deployment makes the same header checks (`HeaderChecks`) before it reads a body or routes a request.
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Awaitable, Callable

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from ors_server.errors import Refused
from ors_server.faces import Face, deny_websocket
from ors_server.http.hosts import AllowedHosts
from ors_server.http.key_throttle import KeyThrottle, client_address
from ors_server.settings import Settings
from ors_server.ui import auth

OPEN_PATHS = {"/health"}
SINGLE_HEADERS = (b"host", b"origin")
"""Headers a request may carry once at most: with two, one check could read one and a later reader the other."""


# A Host echoed in the hint: a name or address with its port, nothing a terminal or a log could misread.
_SHOWABLE_HOST = re.compile(r"[A-Za-z0-9.\-\[\]:]{1,255}")


def host_refusal(host: str) -> str:
    """The 421's message: the MCP SDK's headline, then how an operator lets this host in."""
    shown = host if _SHOWABLE_HOST.fullmatch(host) else "HOST[:PORT]"
    return (
        "Invalid Host header: this server answers only loopback names, its --host address and every "
        f"--allowed-host; to accept this one, start it with --allowed-host {shown}"
    )


class HeaderChecks:
    """What is refused on a request's headers alone, in this order: a duplicated Host or Origin (400, every path),
    a Host or browser Origin outside the allowed list (421 / 403: DNS-rebinding protection, see
    `ors_server.http.hosts`) and a missing or wrong API key (401, when one is set), the last two on every path but
    `/health` (WebSockets have no open path). The web page's login form and static files need no key
    (`ors_server.ui.auth.keyless`), but are still held to the Host/Origin checks.

    The key is accepted as `Authorization: Bearer <key>` or `X-API-Key: <key>` (what the `openreward`
    client sends), or as the web page's cookie (`ors_server.ui.auth`), compared in constant time. With a
    `throttle`, failed key checks are counted per client address and an address past its budget gets 429
    (`ors_server.http.key_throttle`).
    """

    def __init__(
        self,
        hosts: AllowedHosts,
        api_key: str | None,
        cookies: auth.Cookies | None = None,
        throttle: KeyThrottle | None = None,
    ) -> None:
        self.hosts = hosts
        self.api_key = api_key.encode() if api_key else None
        if cookies is None and self.api_key is not None:
            cookies = auth.Cookies(self.api_key, secrets.token_bytes(32), auth.DEFAULT_LIFETIME)
        self.cookies = cookies
        self.throttle = throttle

    @classmethod
    def from_settings(cls, settings: Settings, *, throttled: bool = True) -> HeaderChecks:
        """The checks `settings` ask for; `throttled=False` for a worker behind a front (it sees only the front's
        address: the front counts the failures)."""
        key = settings.api_key
        cookies = auth.Cookies(key.encode(), settings.ui_secret.encode(), settings.ui_login_seconds) if key else None
        throttle = KeyThrottle(settings.key_failures_per_minute) if key and throttled else None
        return cls(AllowedHosts(settings), key, cookies, throttle)

    def refusal(self, scope: Scope) -> Refused | None:
        """Why this request is refused on its headers, or None."""
        seen: set[bytes] = set()
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            if name in SINGLE_HEADERS:
                if name in seen:
                    return Refused(400, f"duplicate {name.decode().capitalize()} header")
                seen.add(name)
            headers[name] = value
        if scope["type"] == "http" and scope["path"] in OPEN_PATHS:
            return None
        stranger = self._stranger(headers)
        if stranger is not None:
            return stranger
        if self.api_key is None:
            return None
        if self.throttle is not None:
            wait = self.throttle.retry_after(client_address(scope))
            if wait:
                message = f"too many wrong API keys from this address: try again in {wait} s"
                return Refused(429, message, {"Retry-After": str(wait)})
        authorized, offered = self._authorized(headers)
        if authorized or (scope["type"] == "http" and auth.keyless(scope["path"])):
            return None
        if offered:
            self.failed(scope)
        return Refused(401, "missing or wrong API key", {"WWW-Authenticate": "Bearer"})

    def failed(self, scope: Scope) -> None:
        """Count a failed key check of the request's client (a wrong key in the login form counts too)."""
        if self.throttle is not None:
            self.throttle.failed(client_address(scope))

    def issue_cookie(self) -> str:
        assert self.cookies is not None
        return self.cookies.issue()

    def revoke_cookie(self, token: bytes) -> None:
        if self.cookies is not None:
            self.cookies.revoke(token)

    def _stranger(self, headers: dict[bytes, bytes]) -> Refused | None:
        """The refusal for a request from outside the allowed hosts, as the MCP SDK answers it; else None."""
        host = headers.get(b"host", b"").decode("latin-1")
        if not self.hosts.allows_host(host):
            return Refused(421, host_refusal(host))
        origin = headers.get(b"origin")
        if origin is not None and not self.hosts.allows_origin(origin.decode("latin-1")):
            return Refused(403, "Invalid Origin header")
        return None

    def _authorized(self, headers: dict[bytes, bytes]) -> tuple[bool, bool]:
        """Whether the request carries the key (or a valid cookie), and whether it offered any key at all."""
        assert self.api_key is not None and self.cookies is not None
        bearer = headers.get(b"authorization", b"")
        keys = [headers.get(b"x-api-key", b"")]
        if bearer[:7].lower() == b"bearer ":
            keys.append(bearer[7:].strip())
        cookie = auth.cookie_from(headers.get(b"cookie", b""))
        # Check every candidate so timing does not reveal which header was checked.
        matches = [hmac.compare_digest(candidate, self.api_key) for candidate in keys]
        matches.append(self.cookies.expiry(cookie) is not None)
        return any(matches), any(keys) or bool(cookie)


async def count_body(
    app: Callable[[Face, Scope, Receive, Send], Awaitable[None]],
    face: Face,
    scope: Scope,
    receive: Receive,
    send: Send,
    max_body_bytes: int,
    too_large: Response,
) -> None:
    """Run `app` on a body of undeclared size (chunked), counted as it arrives. Past `max_body_bytes` the client
    gets `too_large` (the 413) at once and the app sees a disconnect, so no face ever holds more than the limit in
    memory."""
    received = 0
    started = answered = False

    async def counted_receive() -> Message:
        nonlocal received, answered
        if answered:
            return {"type": "http.disconnect"}
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > max_body_bytes:
                if not started:
                    answered = True
                    await too_large(scope, receive, send)
                return {"type": "http.disconnect"}
        return message

    async def guarded_send(message: Message) -> None:
        nonlocal started
        if answered:
            return  # the client has its 413; whatever the app answers to the disconnect is dropped
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await app(face, scope, counted_receive, guarded_send)
    except Exception:
        if not answered:
            raise
        # The app failed on the disconnect it was shown, after the client already had its answer.


async def refuse_websocket(scope: Scope, receive: Receive, send: Send, refusal: Refused, response: Response) -> None:
    """Refuse a WebSocket handshake for `refusal`: a stranger Host or Origin with a close (403, the answer a
    browser's page gets, as before), anything else with `response` where the server can send one."""
    if refusal.status in (421, 403):
        # A close reason has at most 123 bytes: the headline only ("Invalid Host header").
        await send({"type": "websocket.close", "code": 1008, "reason": refusal.message.split(":", 1)[0]})
    else:
        await deny_websocket(scope, receive, send, response)
