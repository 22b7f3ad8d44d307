"""Scaling out: many worker processes, each the unchanged server, behind a session-routing front.

- `keys`: which session a request belongs to, and whether it creates one (the same rule for every face).
- `table`: the workers a front routes to, their reported load, and where a new session goes.
- `directory`: a front's bounded memory of which worker holds which session id.
- `upstream`: the front's keep-alive HTTP/1.1 client to one worker.
- `front`: the ASGI front that places new sessions and routes every request, stream and WebSocket to its owner.
- `metrics`: `/metrics` of all workers as one scrape, with a `worker` label.
- `worker`, `local`: worker processes on one host and the supervisor that keeps them running.
- `on_ray`: workers as Ray actors across a cluster, a controller actor that keeps the worker table.

What a worker needs of this lives on the floors below, so nothing under `scale/` is imported by them: session
ids that name their worker (`ors_server.ids`, core), the MCP face's transport-id tagging
(`ors_server.faces.tagging`), and the worker side of placement, which answers a front's lookups and reports the
worker's load (`ors_server.http.lookup`, middleware of the app floor).
"""
