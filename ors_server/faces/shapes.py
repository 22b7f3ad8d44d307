"""Which face a path belongs to, and an error in that face's own shape.

Middleware that refuses a request before any face sees it (auth, body limits) still answers in the
caller's protocol: ORS `{"detail"}`, control plane `{"error"}`, MCP a JSON-RPC error.
"""

from __future__ import annotations

from typing import Literal

from starlette.responses import JSONResponse

Face = Literal["ors", "mcp", "control"]


def face_of(path: str) -> Face:
    parts = [part for part in path.split("/") if part]
    if parts[-1:] == ["mcp"]:
        return "mcp"
    if "control" in parts[:2]:
        return "control"
    return "ors"


def error_response(path: str, status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    face = face_of(path)
    if face == "mcp":
        # -32600 (invalid request) for refusals; the HTTP status says why.
        body: object = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    elif face == "control":
        body = {"error": message}
    else:
        body = {"detail": message}
    return JSONResponse(body, status, headers=headers)
