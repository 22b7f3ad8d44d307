"""CPU µs per request of each kind, through the ASGI app (no sockets): an ORS math episode and an Eval Protocol
FrozenLake step (MCP tools/call, control reward and status, a reset when an episode ends), and, interleaved with
the step's plain 2025 `tools/call`, the same move as a 2026-07-28 `tools/call` (no protocol session; the episode
named by `X-Session-ID`).

    python bench/request_kinds.py [--no-episodes] [--profile cumulative|tottime]

Work a request leaves to a task (an episode's setup after /create) is counted in whichever request runs then (the
/prompt that waits for it). Run with ORS_RECORDS=off to leave the records' writer thread out of the figures.
"""

import collections
import cProfile
import json
import logging
import pstats
import sys
import time
import uuid
from pathlib import Path

import anyio
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ors_server.http.app import create_app  # noqa: E402
from ors_server.loading import resolve_environments  # noqa: E402
from ors_server.settings import Settings  # noqa: E402

cost = collections.defaultdict(float)
count = collections.Counter()


async def req(app, method, path, body=b"", headers=None, label=None):
    hdrs = [(b"host", b"127.0.0.1")] + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if body:
        hdrs.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": hdrs,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    sent = False
    out = {"body": b"", "headers": {}}

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()

    async def send(m):
        if m["type"] == "http.response.start":
            out["status"] = m["status"]
            out["headers"] = {k.decode(): v.decode() for k, v in m["headers"]}
        elif m["type"] == "http.response.body":
            out["body"] += m.get("body", b"")

    t = time.process_time()
    await app(scope, receive, send)
    cost[label or path] += time.process_time() - t
    count[label or path] += 1
    return out


J = {"content-type": "application/json"}


async def episode(app):
    r = await req(app, "POST", "/create_session", b"{}", {"accept": "application/json", **J})
    sid = json.loads(r["body"])["sid"]
    h = {"x-session-id": sid, **J}
    await req(
        app,
        "POST",
        "/create",
        json.dumps({"env_name": "math", "task_spec": {"question": "What is 2+2?", "answer": "4"}}).encode(),
        h,
    )
    r = await req(app, "GET", "/math/prompt", b"", h)
    assert b"2+2" in r["body"], r
    r = await req(app, "POST", "/math/call", json.dumps({"name": "submit", "input": {"answer": "4"}}).encode(), h)
    assert b'"reward":1.0' in r["body"], r
    await req(app, "POST", "/delete", b"", h)


async def ep_setup(app, i):
    sid = uuid.uuid4().hex
    info = {"name": "b", "version": "1", "_extra": {"session_id": sid, "seed": 1000 + i}}
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": info},
        }
    ).encode()
    hd = {"accept": "application/json, text/event-stream", **J}
    r = await req(app, "POST", "/frozen_lake/mcp/", body, hd, "init")
    hd = {**hd, "mcp-session-id": r["headers"]["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    await req(
        app,
        "POST",
        "/frozen_lake/mcp/",
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(),
        hd,
        "initialized",
    )
    return sid, hd


async def ep_step(app, sid, hd, n, act):
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": "lake_move", "arguments": {"action": act}},
        }
    ).encode()
    r = await req(app, "POST", "/frozen_lake/mcp/", body, hd, "mcp tools/call")
    assert b'isError":false' in r["body"] or b'"isError": false' in r["body"] or b"result" in r["body"], r
    await req(app, "GET", "/frozen_lake/control/reward", b"", {"mcp-session-id": sid}, "control reward")
    r = await req(app, "GET", "/frozen_lake/control/status", b"", {"mcp-session-id": sid}, "control status")
    st = json.loads(r["body"])
    if st["terminated"] or st["truncated"]:
        await req(
            app,
            "POST",
            "/frozen_lake/control/reset_session",
            json.dumps({"seed": 1}).encode(),
            {"mcp-session-id": sid, **J},
            "control reset",
        )


CURRENT_ERA = "2026-07-28"


async def current_era_setup(app) -> dict[str, str]:
    """An episode made by ORS `/create` and named by `X-Session-ID`: what a 2026-07-28 request (no handshake, no
    protocol session) drives."""
    sid = uuid.uuid4().hex
    body = json.dumps({"env_name": "frozen_lake", "task_spec": {"seed": 7}}).encode()
    await req(app, "POST", "/create", body, {"x-session-id": sid, **J}, "create (2026-07-28)")
    accept = {"accept": "application/json, text/event-stream", **J}
    return {**accept, "mcp-protocol-version": CURRENT_ERA, "mcp-method": "tools/call", "mcp-name": "lake_move",
            "x-session-id": sid}  # fmt: skip


async def current_era_call(app, hd, n, act):
    """A 2026-07-28 `tools/call`, as the `mcp` client's `mode="2026-07-28"` sends one: self-contained, its era in
    `_meta`, the routing headers mirrored."""
    meta = {"io.modelcontextprotocol/protocolVersion": CURRENT_ERA, "io.modelcontextprotocol/clientCapabilities": {}}
    params = {"name": "lake_move", "arguments": {"action": act}, "_meta": meta}
    body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}).encode()
    r = await req(app, "POST", "/frozen_lake/mcp", body, hd, "mcp tools/call 2026-07-28")
    assert b'"isError":false' in r["body"], r


async def main():
    logging.getLogger("ors_server").setLevel(logging.WARNING)
    envs = resolve_environments(["math", "frozen_lake"])
    app = create_app(envs, Settings())
    prof = cProfile.Profile() if "--profile" in sys.argv else None
    async with app.router.lifespan_context(app):
        for _ in range(100):
            await episode(app)
        sid, hd = await ep_setup(app, 0)
        for i in range(100):
            await ep_step(app, sid, hd, i + 1, "LEFT")
        current = await current_era_setup(app)
        for i in range(50):
            await current_era_call(app, current, i + 1, "LEFT")
        cost.clear()
        count.clear()
        if prof:
            prof.enable()
        if "--no-episodes" not in sys.argv:
            for _ in range(1500):
                await episode(app)
        for i in range(1500):
            await ep_step(app, sid, hd, i + 200, ["LEFT", "UP"][i % 2])
            if i % 50 == 0:  # a new episode before FrozenLake's step limit ends this one
                current = await current_era_setup(app)
            await current_era_call(app, current, i + 200, ["LEFT", "UP"][i % 2])  # interleaved with the 2025 call
        if prof:
            prof.disable()
    for k in cost:
        print(f"{k:22} {cost[k] / count[k] * 1e6:7.0f} CPU us  (n={count[k]})")
    if prof:
        pstats.Stats(prof).sort_stats(sys.argv[-1]).print_stats(60)


if __name__ == "__main__":
    uvloop.run(main())
