"""Refusals before any face runs: the optional API key and the request body size limit."""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from ors_server.faces.shapes import error_response

OPEN_PATHS = {"/health"}


class Guard:
    """Require the API key (when one is set) on every path but `/health`; refuse declared oversize bodies.

    The key is accepted as `Authorization: Bearer <key>` or `X-API-Key: <key>` (what the `openreward`
    client sends), compared in constant time.
    """

    def __init__(self, app: ASGIApp, api_key: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        path = scope["path"]
        if self.api_key is not None and path not in OPEN_PATHS and not self._authorized(headers):
            response = error_response(path, 401, "missing or wrong API key", {"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            response = error_response(path, 413, f"request body larger than {self.max_body_bytes} bytes")
            return await response(scope, receive, send)
        await self.app(scope, receive, send)

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        assert self.api_key is not None
        bearer = headers.get(b"authorization", b"")
        offered = [headers.get(b"x-api-key", b"")]
        if bearer[:7].lower() == b"bearer ":
            offered.append(bearer[7:].strip())
        # Compare every candidate so timing does not reveal which header was checked.
        matches = [hmac.compare_digest(candidate, self.api_key) for candidate in offered]
        return any(matches)
