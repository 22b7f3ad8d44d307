"""`ors-client` against the official `openreward` client, on one of our servers, in one run:

    python bench/client.py [--seconds 6] [--rounds 2] [--concurrency 1 64 512]

Both clients drive the same `ors-server serve --env math --env bench.envs:Counter` (started once), each from its
own process and venv (`ors-client` alone; `openreward` 0.1.167 with its async client, `AsyncOpenReward`), in
rounds that alternate them (A B A B ...). Figures (medians, ranges over the rounds):

- episodes/s at each concurrency: whole math episodes (open a session, prompt, submit, close);
- client CPU per episode, and per tool call on the `counter` call path (64 sessions calling `tick`): CPU time of
  the client process in the measured window, divided by what it did.

The client venvs are those of the test suite (`$ORS_CLIENT_VENVS`, built by `tests/clients/client_venvs.py`).
The server shares the machine with the client: a figure is what the pair reaches, so a server-bound run shows a
ratio nearer 1 than the clients' own costs would.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.clients import client_venvs  # noqa: E402

HOST = "127.0.0.1"
CLIENTS = {"ors-client": ("ors", "ors-client"), "openreward": ("openreward", "openreward")}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@contextmanager
def our_server(max_sessions: int, env: dict[str, str] | None = None) -> Iterator[str]:
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="ors-bench-client-")) / "server.log"
    command = [str(Path(sys.executable).with_name("ors-server")), "serve", "--port", str(port)]
    command += ["--env", "math", "--env", "bench.envs:Counter", "--max-sessions", str(max_sessions)]
    command += ["--log-level", "warning"]
    with open(log, "wb") as out:
        environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        proc = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 120
        while True:  # a separate process: poll until it accepts connections, bounded
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start; see {log}")
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://{HOST}:{port}"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_client(name: str, url: str, workload: str, concurrency: int, seconds: float) -> dict:
    kind, venv = CLIENTS[name]
    python = client_venvs.ensure_venv(venv)
    env = {**client_venvs.clean_env(), "OPENREWARD_DISABLE_UPDATE_CHECK": "1", "NO_PROXY": HOST, "no_proxy": HOST}
    command = [str(python), str(ROOT / "bench" / "client_load.py"), kind, url, workload, str(concurrency), str(seconds)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=seconds + 300, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{name} {workload} x{concurrency} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    result = json.loads(lines[-1])
    if result["errors"]:
        print(
            f"  {name} {workload} x{concurrency}: {result['errors']} errors, e.g. {result['first_error']}", flush=True
        )
    return result


def spread(values: list[float], digits: int = 1) -> str:
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:.{digits}f}"
    return f"{median:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per run (after 1 s warm-up)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 512])
    parser.add_argument("--call-sessions", type=int, default=64)
    args = parser.parse_args()

    runs = [("episodes", c) for c in args.concurrency] + [("calls", args.call_sessions)]
    samples: dict[tuple[str, int, str], list[dict]] = {}
    with our_server(max_sessions=max(args.concurrency) * 2 + args.call_sessions * 2) as url:
        for round_no in range(args.rounds):
            for workload, concurrency in runs:
                order = list(CLIENTS) if round_no % 2 == 0 else list(reversed(CLIENTS))
                for name in order:
                    result = run_client(name, url, workload, concurrency, args.seconds)
                    samples.setdefault((workload, concurrency, name), []).append(result)
                    rate = result["done"] / result["seconds"]
                    cpu = 1000 * result["cpu"] / max(result["done"], 1)
                    print(
                        f"round {round_no + 1} {workload:8} x{concurrency:<4} {name:11} "
                        f"{rate:8.1f}/s  client CPU {cpu:.2f} ms each",
                        flush=True,
                    )

    print("\nmedians (ranges) over", args.rounds, "rounds; ratio = ors-client / openreward")
    header = f"{'workload':22} {'ors-client /s':>20} {'openreward /s':>20} {'ratio':>6}"
    print(f"{header}   CPU ms each (ors-client / openreward)")
    for workload, concurrency in runs:
        rates, cpus = {}, {}
        for name in CLIENTS:
            got = samples[(workload, concurrency, name)]
            rates[name] = [r["done"] / r["seconds"] for r in got]
            cpus[name] = [1000 * r["cpu"] / max(r["done"], 1) for r in got]
        ratio = statistics.median(rates["ors-client"]) / max(statistics.median(rates["openreward"]), 1e-9)
        cpu_ratio = statistics.median(cpus["openreward"]) / max(statistics.median(cpus["ors-client"]), 1e-9)
        label = f"{workload} x{concurrency}"
        print(
            f"{label:22} {spread(rates['ors-client']):>20} {spread(rates['openreward']):>20} {ratio:6.2f}   "
            f"{spread(cpus['ors-client'], 2):>14} / {spread(cpus['openreward'], 2):<14} ({cpu_ratio:.1f}x less)"
        )


if __name__ == "__main__":
    main()
