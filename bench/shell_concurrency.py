"""Concurrent slow shell commands: wall time of N sessions each running `sleep S` at once, in one server process.

    python bench/shell_concurrency.py [--sessions 200] [--seconds 5] [--sandbox bwrap|none]

Drives the session core directly (no HTTP): N shell sessions are set up, then every session runs `sleep S` at
the same moment, and a math call is made while they run. Prints the wall time of the sleeps against the ideal
(S) and against the time they would take one after another, and how long the math call took.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ors_server.calls import Calls  # noqa: E402
from ors_server.environments.math import Math  # noqa: E402
from ors_server.environments.shell import Shell  # noqa: E402
from ors_server.sessions import SessionStore  # noqa: E402
from ors_server.settings import Settings  # noqa: E402
from ors_server.types import ToolOutput  # noqa: E402


async def main(sessions: int, seconds: float) -> None:
    async with SessionStore(Settings(ready_wait=120)).run() as store:
        pipeline = Calls(store)
        started = time.monotonic()
        for i in range(sessions):
            store.create(f"s{i}", Shell, {"id": "hello_file"})
        shells = [await store.get_ready(f"s{i}") for i in range(sessions)]
        print(f"{sessions} shell sessions set up in {time.monotonic() - started:.1f} s")
        store.create("m", Math, Math.get_task("train", 0))
        math = await store.get_ready("m")

        began = time.monotonic()
        calls = [pipeline.start(s, "bash", {"command": f"sleep {seconds:g}"}) for s in shells]
        math_began = time.monotonic()
        answer = await pipeline.call(math, "submit", {"answer": "0"})
        math_took = time.monotonic() - math_began
        results = [await call.wait() for call in calls]
        wall = time.monotonic() - began
        ok = sum(isinstance(r, ToolOutput) and r.blocks[0].text.startswith("exit code: 0") for r in results)
        assert isinstance(answer, ToolOutput)
        print(f"{ok}/{sessions} `sleep {seconds:g}` calls ended with exit code 0")
        print(f"wall time {wall:.2f} s (ideal {seconds:g} s, one after another {sessions * seconds:g} s)")
        print(f"a math call made while they ran answered in {math_took * 1000:.0f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--sandbox", choices=["bwrap", "none"], default=None, help="sets ORS_SHELL_SANDBOX")
    args = parser.parse_args()
    if args.sandbox:
        os.environ["ORS_SHELL_SANDBOX"] = args.sandbox
    if args.sandbox == "none":
        print("(unsandboxed: the warning every such session logs is not shown)")
        logging.getLogger("ors_server.environments.shell").setLevel(logging.ERROR)
    anyio.run(main, args.sessions, args.seconds)
