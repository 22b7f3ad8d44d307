"""Scaling out: many worker processes, each the unchanged server, behind a session-routing front.

- `ids`: session ids that name the worker that minted them, and the slots client-chosen ids hash to.
- `keys`: which session a request belongs to (the same rule for every face).
- `table`: the workers a front routes to, and which one owns a key.
- `upstream`: the front's keep-alive HTTP/1.1 client to one worker.
- `front`: the stateless ASGI front that routes every request, stream and WebSocket to its owner.
- `metrics`: `/metrics` of all workers as one scrape, with a `worker` label.
- `tagging`: the worker-side shim that tags MCP transport ids.
- `worker`, `local`: worker processes on one host and the supervisor that keeps them running.
- `on_ray`: workers as Ray actors across a cluster, a controller actor that keeps the worker table.
"""
