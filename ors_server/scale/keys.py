"""Which session a request belongs to: the same rule on every face.

In order: the id an MCP episode URL (`/mcp/episodes/{id}`, `/{env}/mcp/episodes/{id}`) names; `X-Session-ID`;
else `mcp-session-id` (an MCP transport id on `/mcp`, the Eval Protocol id on
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


def episode_key(scope: Scope) -> str | None:
    """The session id an MCP episode URL names (`/mcp/episodes/{id}` or `/{env}/mcp/episodes/{id}`), if it is one."""
    parts = scope["path"].rstrip("/").split("/")
    if len(parts) in (4, 5) and parts[-3:-1] == ["mcp", "episodes"] and parts[-1].strip():
        return parts[-1].strip()
    return None


def is_mcp_post(scope: Scope) -> bool:
    """A POST to an MCP endpoint: without a session header, it may be an `initialize` keyed in its body."""
    if scope["method"] != "POST":
        return False
    return scope["path"].rstrip("/").endswith("/mcp") or episode_key(scope) is not None


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


def read_params_session(body: bytes) -> tuple[bool, str | None]:
    """Whether a JSON-RPC request creates a session (OpenEnv's `openenv/session/create`), and the
    `params.session_id` it names (OpenEnv's `tools/call`, `openenv/session/close`, ...)."""
    try:
        message: Any = json.loads(body)
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(message, dict):
        return False, None
    params = message.get("params")
    key = params.get("session_id") if isinstance(params, dict) else None
    return message.get("method") == "openenv/session/create", (str(key).strip() or None) if key is not None else None


def has_transport_id(scope: Scope) -> bool:
    """Whether the request names an MCP transport (`mcp-session-id`): then it is no `initialize`."""
    return any(name == b"mcp-session-id" for name, _ in scope["headers"])


def is_create(scope: Scope) -> bool:
    """Whether the request may start a session under the id it names: ORS `/create`, and the control plane's
    `initial_state` (which opens an unknown Eval Protocol id). An MCP `initialize` is told by its body."""
    path = scope["path"].rstrip("/")
    if scope["method"] == "POST":
        return path.endswith("/create")
    return scope["method"] == "GET" and path.endswith("/control/initial_state")
