"""A server killed with SIGKILL leaves its shell sessions' directories behind; the next server to start removes
them, and never a directory of a server that still runs (workers share the temporary directory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from ors_server.environments.shell.confinement import bwrap_problem
from ors_server.sandboxes.bubblewrap import private_dir, remove_tree
from tests.ors_envs import create, sid_header
from tests.serving import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
TMP = Path(tempfile.gettempdir())


@contextmanager
def shell_server() -> Iterator[tuple[subprocess.Popen[bytes], httpx.Client]]:
    port = free_port()
    argv = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port), "--env", "shell"]
    # With the sandbox where it runs: then, as root, the directory holds a mounted tmpfs too.
    env = {**os.environ, "ORS_SHELL_SANDBOX": "bwrap" if bwrap_problem() is None else "none"}
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert process.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
            yield process, client
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=30)


def shell_dirs() -> set[Path]:
    return {path for path in TMP.iterdir() if path.name.startswith("ors-shell-")}


def test_a_starting_server_removes_what_a_killed_one_left_and_nothing_of_a_live_one() -> None:
    mine = private_dir("shell")  # this process is a live server too, as far as any other is concerned
    (mine / "work").mkdir()
    try:
        with shell_server() as (killed, client):
            before = shell_dirs()
            sid = create(client, {"id": "hello_file"}, env_name="shell")
            assert client.get("/shell/prompt", headers=sid_header(sid)).status_code == 200  # set up by now
            # Only the killed server's own: other tests' servers (pytest-xdist workers) make theirs meanwhile.
            left = {path for path in shell_dirs() - before if path.name.startswith(f"ors-shell-{killed.pid}.")}
            killed.send_signal(signal.SIGKILL)
            killed.wait(timeout=30)
        assert left and all(path.exists() for path in left)  # what SIGKILL leaves behind
        with shell_server():
            assert not any(path.exists() for path in left)
            with open("/proc/self/mountinfo") as file:
                mounts = file.read()
            assert not any(str(path) in mounts for path in left)
            assert (mine / "work").is_dir()
    finally:
        remove_tree(mine)
