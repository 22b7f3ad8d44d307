"""The app floor: the Starlette app assembled from the faces, `Server`, the middleware around them (which may know
the faces, to answer in their shape), and uvicorn's protocol classes with the bounds they lack.

    app.py                  `create_app`: the faces (`FACES`, `SHAPES`), the middleware and the lifespan
    server.py               `Server` and the one `UvicornServer` every serving process runs
    guards.py, hosts.py     refusals before any face runs: Host/Origin, the API key, the body size
    observability.py        Prometheus metrics and access logs
    lookup.py               a worker's side of placement: its fronts' lookups and its load on every reply
    http_protocol.py        httptools with header size and receive-time bounds
    websocket_protocol.py   the WebSocket protocol with send-queue and read-stall bounds
    coalescing.py           one write per response
"""
