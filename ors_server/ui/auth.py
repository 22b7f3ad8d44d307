"""How a browser carries the API key: an HttpOnly cookie holding a token derived from the key.

A browser cannot put a header on a navigation, so `/ui/login` takes the key once (a form POST, never a URL, so
no access log or history holds it) and answers with a cookie the `Guard` accepts on every path, as it accepts
`Authorization: Bearer` and `X-API-Key`. The cookie holds an HMAC of the key, not the key itself: every process
of a deployment derives the same token from the same `--api-key`, and a stolen cookie does not reveal the key
for other uses. `SameSite=Strict` keeps other sites' pages from sending it, and the Host/Origin checks refuse
them besides.
"""

from __future__ import annotations

import hashlib
import hmac

COOKIE = "ors_ui"
LOGIN_PATH = "/ui/login"
STATIC_PREFIX = "/ui/static/"
_CONTEXT = b"ors-server /ui cookie v1"


def cookie_token(api_key: bytes) -> bytes:
    """The cookie value that stands for `api_key`."""
    return hmac.new(api_key, _CONTEXT, hashlib.sha256).hexdigest().encode()


def cookie_from(header: bytes) -> bytes:
    """The value of our cookie in a `Cookie` request header, or b"" when it is not there."""
    for part in header.split(b";"):
        name, sep, value = part.strip().partition(b"=")
        if sep and name == COOKIE.encode():
            return value.strip()
    return b""


def keyless(path: str) -> bool:
    """Paths the key does not guard: the login form (which checks the key itself) and the page's own static
    files (package data, no episode data), so the form can be styled. The Host/Origin checks still apply."""
    return path == LOGIN_PATH or path.startswith(STATIC_PREFIX)
