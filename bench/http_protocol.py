"""Price of the HTTP limits on the call path: `python bench/http_protocol.py` (options: --help).

Our server as `ors-server serve` runs it (httptools with the header size and read-time bounds of
`ors_server.http.http_protocol`) against the same server on uvicorn's stock httptools protocol, interleaved round by
round, on workload a of `bench/run.py` (8 sessions calling a never-ending counter tool over ORS).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402


def serve_for_bench(protocol: str, port: int) -> None:
    """The server process: the counter environment on `protocol` ("bounded" or "stock")."""
    import uvicorn

    from bench.envs import Counter
    from ors_server.http.app import create_app
    from ors_server.http.server import uvicorn_config
    from ors_server.settings import Settings

    settings = Settings(port=port, log_level="warning")
    app = create_app([Counter], settings)
    options = {} if protocol == "bounded" else {"http": "httptools"}
    uvicorn.Server(uvicorn_config(app, settings, host=bench.HOST, port=port, **options)).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measured run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--serve", choices=["bounded", "stock"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve_for_bench(args.serve, args.port)

    rates: dict[str, list[float]] = {"bounded": [], "stock": []}
    for _ in range(args.rounds):
        for protocol in rates:
            with running(protocol) as port:
                result = bench.load(
                    port, args.workers, args.duration, bench.counter_setup, bench.counter_call("/counter/call")
                )
            rates[protocol].append(result.rate)
            print(
                f"{protocol:8} {result.rate:8.0f} calls/s  p50 {result.pct('op', 0.5):.2f} ms  errors {result.errors}"
            )
    bounded, stock = statistics.median(rates["bounded"]), statistics.median(rates["stock"])
    print(
        f"median of {args.rounds} rounds: bounded {bounded:.0f} calls/s, stock {stock:.0f} calls/s,"
        f" ratio {bounded / stock:.3f}"
    )


@contextmanager
def running(protocol: str) -> Iterator[int]:
    """A server process on `protocol`; yields its port once it accepts connections."""
    port = bench.free_port()
    env = {**os.environ, "PYTHONPATH": str(bench.ROOT)}
    proc = subprocess.Popen([sys.executable, __file__, "--serve", protocol, "--port", str(port)], env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the {protocol} server did not start")
            try:
                socket.create_connection((bench.HOST, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(15)


if __name__ == "__main__":
    main()
