"""Worker side of id tagging: MCP transport ids that name their worker.

The `mcp` SDK mints transport ids inline (`uuid4().hex` in the session manager) with no hook, so the
transport is wrapped: the id it sends out gets the worker's tag, and the tag is taken off again before a
request reaches the transport. Everything outside the transport (the MCP face's bindings, the store, the
control plane) sees only the public, tagged id, which is what the front routes on.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ors_server.ids import WorkerTag, split

HEADER = b"mcp-session-id"


def public_id(tag: WorkerTag | None, transport_id: str | None) -> str | None:
    """The id clients see for the SDK's `transport_id`."""
    if tag is None or transport_id is None or split(transport_id) is not None:
        return transport_id
    return tag.tag(transport_id)


def tagged_transport(app: ASGIApp, tag: WorkerTag | None) -> ASGIApp:
    """`app` (the SDK's transport) speaking tagged ids on the outside; `app` itself when there is no tag."""
    if tag is None:
        return app

    async def transport(scope: Scope, receive: Receive, send: Send) -> None:
        headers = []
        for name, value in scope["headers"]:
            if name == HEADER:
                found = split(value.decode("latin-1"))
                if found is not None and found[0] == tag:
                    value = found[1].encode("latin-1")
            headers.append((name, value))

        async def tagging_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [
                        (name, tag.tag(value.decode("latin-1")).encode("latin-1") if name == HEADER else value)
                        for name, value in message.get("headers") or []
                    ],
                }
            await send(message)

        await app({**scope, "headers": headers}, receive, tagging_send)

    return transport
