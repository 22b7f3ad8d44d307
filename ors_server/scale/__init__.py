"""Scaling out: many worker processes, each the unchanged server, behind a session-routing front.

- `ids`: session ids that name the worker that made their session (a hint, never trusted for placement).
- `keys`: which session a request belongs to, and whether it creates one (the same rule for every face).
- `table`: the workers a front routes to, their reported load, and where a new session goes.
- `directory`: a front's bounded memory of which worker holds which session id.
- `lookup`: the worker side: answering a front's lookups and reporting its load on every reply.
- `upstream`: the front's keep-alive HTTP/1.1 client to one worker.
- `front`: the ASGI front that places new sessions and routes every request, stream and WebSocket to its owner.
- `metrics`: `/metrics` of all workers as one scrape, with a `worker` label.
- `tagging`: the worker-side shim that tags MCP transport ids.
- `worker`, `local`: worker processes on one host and the supervisor that keeps them running.
- `on_ray`: workers as Ray actors across a cluster, a controller actor that keeps the worker table.
"""
