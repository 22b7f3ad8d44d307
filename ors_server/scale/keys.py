"""Which session a request belongs to: the same rule on every face.

In order: `X-Session-ID`; else `mcp-session-id` (an MCP transport id on `/mcp`, the Eval Protocol id on
`/control/*`); else a WebSocket's `?session_id=`. Only an MCP `initialize` that carries none of these is
read for `clientInfo._extra.session_id`, the key Eval Protocol's client names its rollout with, and any other
JSON-RPC POST for `params.session_id`, where OpenEnv's `MCPToolClient` names its session.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from starlette.types import Scope


def header_key(scope: Scope) -> str | None:
    """The session key named by headers or (for a WebSocket) the query string; None if there is none."""
    mcp_id = None
    for name, value in scope["headers"]:
        if name == b"x-session-id":
            return value.decode("latin-1").strip() or None
        if name == b"mcp-session-id":
            mcp_id = value.decode("latin-1").strip() or None
    if mcp_id is not None:
        return mcp_id
    if scope["type"] == "websocket" and scope.get("query_string"):
        found = parse_qs(scope["query_string"].decode("latin-1")).get("session_id")
        return found[0] if found else None
    return None


def is_mcp_post(scope: Scope) -> bool:
    """A POST to an MCP endpoint: without a session header, it may be an `initialize` keyed in its body."""
    return scope["method"] == "POST" and scope["path"].rstrip("/").endswith("/mcp")


def read_initialize(body: bytes) -> tuple[bool, str | None]:
    """Whether `body` is an MCP `initialize`, and the `params.clientInfo._extra.session_id` it names, if any."""
    try:
        message: Any = json.loads(body)
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return False, None
    extra: Any = message
    for field in ("params", "clientInfo", "_extra"):
        extra = extra.get(field) if isinstance(extra, dict) else None
    key = extra.get("session_id") if isinstance(extra, dict) else None
    return True, (str(key).strip() or None) if key is not None else None


def read_params_session(body: bytes) -> str | None:
    """The `params.session_id` a JSON-RPC request names (OpenEnv's `tools/call`, `openenv/session/close`, ...)."""
    try:
        message: Any = json.loads(body)
    except (ValueError, RecursionError):
        return None
    params = message.get("params") if isinstance(message, dict) else None
    key = params.get("session_id") if isinstance(params, dict) else None
    return (str(key).strip() or None) if key is not None else None


def is_create(scope: Scope) -> bool:
    """Whether the request is an ORS `/create`, which starts a session under the id it names."""
    return scope["method"] == "POST" and scope["path"].rstrip("/").endswith("/create")
