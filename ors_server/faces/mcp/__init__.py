"""The MCP face: streamable HTTP at `/{env}/mcp` (and `/mcp` for the default environment).

Built on the `mcp` SDK 2.x: a low-level `Server` (`tools/list`, `tools/call`) behind one stateful
`StreamableHTTPSessionManager` with JSON responses. Both `/mcp` and `/mcp/` are served directly, since
Eval Protocol always appends the slash and a redirect would double its round trips.

Binding an MCP session to an episode
    An MCP transport session (the `mcp-session-id` the manager mints at `initialize`) is bound to one key of
    the shared session store, chosen at `initialize`:

    1. `params.clientInfo._extra.session_id`, as Eval Protocol sends it (with `seed` and `config`, which
       shape the task through `task_from_seed`). The `mcp` 2.x SDK drops unknown `clientInfo` keys from
       its typed params, so the raw `initialize` body is read here, before the SDK parses it.
    2. else the `X-Session-ID` request header of the `initialize` POST. This is how an `mcp` 2.x client
       (which cannot send `_extra`) names a session, for example one created through ORS `/create`:
       `streamable_http_client(url, http_client=httpx2.AsyncClient(headers={"X-Session-ID": sid}))`.
    3. else the transport id itself: a fresh episode (seeded by `_extra.seed`/`config` if given).

    When the episode is named at `initialize` (1 or 2), the `initialize` result carries its task statement as
    `instructions` (the text of `get_prompt()`), once setup is done: the answer waits for setup up to
    `ready_wait` and leaves `instructions` out rather than fail the handshake. The prompt `task` (`prompts/get`)
    serves the same statement, images included, for every binding.

    An unknown key creates the session (`created_by="mcp"`). A known key attaches to the live episode,
    whichever face created it, except that re-initializing an MCP-created key whose episode has already
    been stepped restarts it (`store.reset` with the same seed), so running the same dataset row again on
    a running server starts from the identical initial state.

    The face keeps one map, transport id -> store key, and nothing else about episodes.

When episodes end
    An MCP-created episode ends when the last MCP transport bound to it closes (an HTTP `DELETE`, or the
    transport going idle for `session_timeout`), or by ORS `/delete`, or by the store's reaper. An episode
    created by another face (ORS `/create`, the control plane) never ends because an MCP transport closed.
    Reads on the control plane do not keep an MCP-created episode alive past its last transport: Eval
    Protocol ends every rollout with `reset_session` and then `DELETE`, and the next run of the row
    initializes again (see above).

Protocol eras
    Both are served on every MCP endpoint. The 2025 era (`initialize`, then `mcp-session-id`) binds as above. The
    2026-07-28 era has no handshake and no protocol session: every request is a self-contained POST that names its
    episode itself: by its URL, `/{env}/mcp/episodes/{session_id}` (`/mcp/episodes/{session_id}` for the default
    environment), else by the `X-Session-ID` header. `server/discover` offers 2026-07-28 only to a request that
    names an episode so; elsewhere it offers the handshake's versions, so a client in its default mode
    (`mcp.Client(url)`, fastmcp's) sends `initialize` at a plain URL and plays an episode of its own, as it did
    before discovery was answered, rather than adopt an era in which it could run no call. A current-era
    `tools/call` naming none is a JSON-RPC error saying how to name one; discovery, `tools/list` and prompt
    listing need none. An episode URL also names the episode of a 2025 `initialize` sent to it (before
    `_extra.session_id` and the header), and a transport opened on one episode URL is refused on another.

Results
    `tools/call` goes through the store's one call pipeline and renders the observation (text and image blocks)
    unchanged, since Eval Protocol's clients parse the text, and the step's `reward` and `finished` (plus the
    fields of a JSON object observation) as `structuredContent`, which every tool declares as its
    `outputSchema`. Unknown tools, invalid arguments, a raising tool and calls after the episode finished are
    `isError` results, never transport errors. HTTP-level refusals (bad Host, oversized or malformed bodies, a
    full store) are 4xx/503 with a JSON-RPC error body.

Layers (as the SDK's: transport, session, handlers)
    transport.py    the SDK's session managers, the raw ASGI endpoint, and each request's way to them: bodies
                    read and replayed, refusals as JSON-RPC errors, a bound transport's requests counted
    binding.py      session binding: which episode each request or protocol session plays, in both eras
    handlers.py     the SDK `Server`'s handlers: discovery, tools/list, tools/call with progress, the task prompt
                    and resource, the `initialize` instructions
    plain_call.py   a plain 2025-era `tools/call` answered without the SDK's transport
    naming.py       how a request names its session, as a scale-out front reads it (`Face.names_session`)
    wire.py         tool lists, call results, the task prompt and resource, JSON-RPC errors
    face.py         `McpFace`: the above put together, and the face's declaration
"""

from ors_server.faces.mcp.face import McpFace, face, shape
from ors_server.faces.mcp.transport import routes
from ors_server.faces.mcp.wire import render, render_error, rpc_error

__all__ = ["McpFace", "face", "render", "render_error", "routes", "rpc_error", "shape"]
