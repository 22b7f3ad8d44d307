"""What a server process does for itself, beyond the app it serves: run as `Server(...).run()` in a process of
its own, as `ors-server serve` and the scale-out workers run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.ors_envs import call, call_result, create
from tests.serving import free_port, wait_for_health

ROOT = Path(__file__).resolve().parent.parent


def test_a_server_process_freezes_what_it_loaded_at_startup_out_of_the_garbage_collectors_sight() -> None:
    port = free_port()
    script = (
        "from ors_server.http.server import Server\n"
        "from tests.ors_envs import ProcessProbe\n"
        f"Server([ProcessProbe], port={port}, log_level='warning').run()\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, process)
        with httpx.Client(base_url=url, timeout=30) as client:
            sid = create(client, {})
            result = call_result(call(client, sid, "frozen_objects", path="/processprobe/call"))
        frozen = int(result["output"]["blocks"][0]["text"])
        assert frozen > 10_000  # the modules and the app: tens of thousands of objects
    finally:
        process.terminate()
        process.wait(timeout=30)
