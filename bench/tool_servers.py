"""What composed stdio tool servers cost: the `calculator` environment's `calc` server, under a real `ors-server`.

    python bench/tool_servers.py [--sessions 30] [--timeout 3]

Prints, for one server process started as a user would (`ors-server serve --env calculator`):
- the resident memory of each session's `calc` process (one per session);
- churn: `--sessions` sessions created at once and deleted (a third after one call, a third after asking for the
  prompt, a third at once), then the `calc` processes still alive 1 s and 10 s after the last DELETE answered;
- a runaway calculation: a call past `--tool-server-timeout`, then whether its process lives and the CPU seconds it
  used in the 3 s after the call was answered.
Figures are raw: compare runs made in the same sitting (see /work/shared/BENCHMARKING.md).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.serving import free_port  # noqa: E402

MARK = b"ors_server.environments.tool_servers.calc"


PARENT = 0
"""The benchmarked server's pid: only its children count (other servers may run on the machine)."""
SEEN: set[int] = set()
"""Every calc process of the benchmarked server seen so far."""


def calc_pids() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state, parent = f.read().rpartition(")")[2].split()[:2]
        except OSError:
            continue
        if MARK in cmdline and state != "Z" and int(parent) == PARENT:
            pids.append(int(entry))
    SEEN.update(pids)
    return pids


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, timeout: float) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "ors_server.cli", "serve", "--env", "calculator", "--port", str(self.port)]
        command += ["--tool-server-timeout", str(timeout), "--log-level", "warning"]
        self.process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        global PARENT
        PARENT = self.process.pid
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=120)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.client.get("/health")
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def create(self) -> str:
        sid = uuid.uuid4().hex
        body = {"env_name": "calculator", "split": "train", "index": 0}
        self.client.post("/create", json=body, headers={"X-Session-ID": sid}).raise_for_status()
        return sid

    def call(self, sid: str, expression: str) -> str:
        body = {"name": "calc__evaluate", "input": {"expression": expression}}
        with self.client.stream("POST", "/calculator/call", json=body, headers={"X-Session-ID": sid}) as response:
            return response.read().decode()

    def delete(self, sid: str) -> None:
        self.client.post("/delete", headers={"X-Session-ID": sid})

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(60)


def memory(server: Server, sessions: int = 4) -> None:
    sids = [server.create() for _ in range(sessions)]
    for sid in sids:
        server.call(sid, "2*3")
    print(f"RSS per calc process (MB): {sorted(round(rss_mb(p)) for p in calc_pids())}")
    for sid in sids:
        server.delete(sid)
    print(f"calc processes alive after their sessions were deleted: {len(calc_pids())}")


def churn(server: Server, sessions: int) -> None:
    def one(index: int) -> None:
        sid = server.create()
        if index % 3 == 0:
            server.call(sid, "2*3")
        elif index % 3 == 1:
            server.client.get("/prompt", headers={"X-Session-ID": sid})
        server.delete(sid)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(1)
    after_1 = len(calc_pids())
    time.sleep(9)
    print(f"churn of {sessions} sessions: calc processes alive 1 s after: {after_1}, 10 s after: {len(calc_pids())}")


def runaway(server: Server) -> None:
    sid = server.create()
    server.call(sid, "1")
    [pid] = calc_pids()
    started = time.monotonic()
    answer = server.call(sid, "((10**1000)**1000)**1000")
    print(f"runaway call answered after {time.monotonic() - started:.1f} s: {'did not finish' in answer}")
    before = cpu_seconds(pid)
    time.sleep(3)
    after = cpu_seconds(pid)
    used = None if before is None or after is None else round(after - before, 2)
    print(f"runaway process alive 3 s later: {after is not None}; its CPU seconds in those 3 s: {used}")
    answered = '"ok":true' in server.call(sid, "2+2")
    print(f"the next call answers: {answered}")
    server.delete(sid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--timeout", type=float, default=3.0)
    options = parser.parse_args()
    server = Server(options.timeout)
    try:
        memory(server)
        runaway(server)
        churn(server, options.sessions)
    finally:
        server.stop()
    time.sleep(1)
    left = [pid for pid in SEEN if alive(pid)]  # pids are not reused this fast on a quiet machine
    print(f"calc processes alive 1 s after shutdown: {len(left)}")


if __name__ == "__main__":
    main()
