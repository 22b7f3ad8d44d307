"""A real uvicorn server on a free loopback port, in a thread of the test process; and the wait for a server in a
process of its own to answer."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import uvicorn

from ors_server.http.server import uvicorn_config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listens(process: subprocess.Popen, port: int) -> bool:
    """Whether `process`, or a process it started, holds the socket listening on `port` (Linux's /proc): a server
    answering /health there may otherwise be another test's, which got the same free port."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    tree = [process.pid]
    while tree:
        pid = tree.pop()
        tree += children.get(pid, [])
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                        return True
    return False


@contextlib.contextmanager
def serve(app, log_level: str = "warning", **options) -> Iterator[str]:
    """Run `app` under a real uvicorn server until the block ends; yields its base URL.

    An app built by `create_app` is served as `ors-server serve` serves it (its HTTP limits included).
    `options` go to `uvicorn.Config` (for example `ws_ping_interval`)."""
    port = free_port()
    settings = getattr(getattr(app, "state", None), "settings", None)
    if settings is not None:
        config = uvicorn_config(
            app, settings, host="127.0.0.1", port=port, log_level=log_level, lifespan="on", **options
        )
    else:
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level, lifespan="on", **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


class PortTaken(AssertionError):
    """The server exited at start because its port was taken: a test in another xdist worker got the same free
    port (start it again on another)."""


def wait_for_health(
    url: str,
    process: subprocess.Popen | None = None,
    *,
    within: float = 180.0,
    what: str = "the server",
    log: Path | None = None,
    own_port: bool = False,
) -> None:
    """Return once `url`/health answers 200. A server in another process gives no event to wait on: poll, bounded.
    Fails naming `what` (with the tail of `log`, its output) if `process` exits first or `within` seconds pass: a
    bound, not an expectation (a healthy server answers in seconds, but on a loaded 2-core machine running the
    slowest modules together an import can take a minute). With `own_port`, the answer counts only once `process`
    (or a process it started) listens on the port: another test's server may hold it and answer for ours; if that
    made `process` exit, PortTaken."""
    port = int(url.rsplit(":", 1)[1])
    deadline = time.monotonic() + within
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                if not own_port or process is None or listens(process, port):
                    return
        except httpx.TransportError:
            pass
        exited = process is not None and process.poll() is not None
        if exited or time.monotonic() > deadline:
            output = log.read_text(errors="replace")[-4000:] if log is not None else ""
            if exited and own_port and "already in use" in output:
                raise PortTaken(f"{what} found its port {port} taken")
            tail = f":\n{output}" if log is not None else ""
            raise AssertionError(f"{what} {'exited at start' if exited else 'did not answer /health'}{tail}")
        time.sleep(0.1)
