"""How MCP requests name their session, as a scale-out front reads them before any worker has seen them.

In order: the id an episode URL (`/mcp/episodes/{id}`, `/{env}/mcp/episodes/{id}`) names; `X-Session-ID`; else
`mcp-session-id` (a transport id, which names its worker: `faces/tagging.py`). Only an `initialize` (a POST with
no transport id) is read for `params.clientInfo._extra.session_id`, the key Eval Protocol's client names its
rollout with; it may create the session, and the transport id its reply carries names the session too.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Scope

from ors_server.faces import Naming, header_key

TRANSPORT_HEADER = b"mcp-session-id"


def names_session(scope: Scope, body: bytes | None) -> Naming:
    """The session an MCP request names (`Face.names_session`)."""
    episode = episode_key(scope)  # an episode URL binds every request on it to its session
    key = episode or header_key(scope, b"x-session-id", TRANSPORT_HEADER)
    if body is None or scope["method"] != "POST" or any(name == TRANSPORT_HEADER for name, _ in scope["headers"]):
        return Naming(key)
    initialize, named = read_initialize(body)
    if not initialize:
        return Naming(key)
    # An `initialize` creates or attaches to the session its episode URL (else `_extra.session_id`, else
    # X-Session-ID) names.
    return Naming(episode or named or key, creates=True, alias_header=TRANSPORT_HEADER)


def episode_key(scope: Scope) -> str | None:
    """The session id an episode URL (`/mcp/episodes/{id}` or `/{env}/mcp/episodes/{id}`) names, if it is one."""
    parts = scope["path"].rstrip("/").split("/")
    if len(parts) in (4, 5) and parts[-3:-1] == ["mcp", "episodes"] and parts[-1].strip():
        return parts[-1].strip()
    return None


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
