"""How a browser carries the API key: an HttpOnly cookie holding a signed login time, valid for a while.

A browser cannot put a header on a navigation, so `/ui/login` takes the key once (a form POST, never a URL, so
no access log or history holds it) and answers with a cookie the server accepts on every path, as it accepts
`Authorization: Bearer` and `X-API-Key`. The cookie is `<issued>.<mac>`: the Unix time of the login and an HMAC of
it under a key derived from the API key and the deployment's secret (`Settings.ui_secret`, random at each start
and handed to every worker and front with the API key), so

- it reveals nothing of the key, and every process of a deployment accepts what any of them issued;
- it expires `--ui-login-seconds` after the login (the cookie's Max-Age says so too, and the server checks it);
- it can be revoked on the server: `/ui/logout` revokes the cookie it was sent with (in every front of a
  deployment), a new API key revokes them all, and so does restarting the server (a new secret).

`SameSite=Strict` keeps other sites' pages from sending it, and the Host/Origin checks refuse them besides.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable

from starlette.types import Scope

COOKIE = "ors_ui"
LOGIN_PATH = "/ui/login"
LOGOUT_PATH = "/ui/logout"
STATIC_PREFIX = "/ui/static/"
_CONTEXT = b"ors-server /ui cookie v2"
DEFAULT_LIFETIME = 12 * 3600.0
"""Seconds a login lasts unless told otherwise (`--ui-login-seconds`)."""
CLOCK_SKEW = 60.0
"""Seconds a login time may lie in the future (another host of the deployment issued it, its clock ahead)."""


class Cookies:
    """Issues and checks the page's cookies (see the module docstring); keeps the revoked ones until they expire."""

    def __init__(self, api_key: bytes, secret: bytes, lifetime: float, clock: Callable[[], float] = time.time) -> None:
        self._key = hmac.new(api_key, _CONTEXT + secret, hashlib.sha256).digest()
        self.lifetime = lifetime
        self.clock = clock
        self._revoked: dict[bytes, float] = {}
        """Revoked cookies -> when they expire anyway (then they are forgotten)."""

    def _mac(self, issued: bytes) -> bytes:
        return hmac.new(self._key, issued, hashlib.sha256).hexdigest().encode()

    def issue(self) -> str:
        issued = b"%d" % int(self.clock())
        return (issued + b"." + self._mac(issued)).decode()

    def expiry(self, token: bytes) -> float | None:
        """When `token` expires, if it is one of ours, unexpired and not revoked; else None."""
        issued, dot, mac = token.partition(b".")
        if not dot or not issued.isdigit() or len(issued) > 12:
            return None
        if not hmac.compare_digest(mac, self._mac(issued)):
            return None
        now, expires = self.clock(), int(issued) + self.lifetime
        if not int(issued) - CLOCK_SKEW <= now < expires or token in self._revoked:
            return None
        return expires

    def revoke(self, token: bytes) -> None:
        """From now on `token` is refused here (a cookie that is not valid needs no revoking)."""
        expires = self.expiry(token)
        if expires is None:
            return
        now = self.clock()
        for old in [old for old, until in self._revoked.items() if until <= now]:
            del self._revoked[old]
        self._revoked[token] = expires


def cookie_from(header: bytes) -> bytes:
    """The value of our cookie in a `Cookie` request header, or b"" when it is not there."""
    for part in header.split(b";"):
        name, sep, value = part.strip().partition(b"=")
        if sep and name == COOKIE.encode():
            return value.strip()
    return b""


def revoked_by(scope: Scope, status: int) -> bytes | None:
    """The cookie a logout answered with `status` revoked, if any (`Face.revokes`: a scale-out front revokes it too,
    and tells the other fronts)."""
    if scope["path"] != LOGOUT_PATH or status >= 400:
        return None
    header = b"".join(value for name, value in scope["headers"] if name == b"cookie")
    return cookie_from(header) or None


def keyless(path: str) -> bool:
    """Paths the key does not guard: the login form (which checks the key itself) and the page's own static
    files (package data, no episode data), so the form can be styled. The Host/Origin checks still apply."""
    return path == LOGIN_PATH or path.startswith(STATIC_PREFIX)
