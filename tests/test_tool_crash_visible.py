"""A tool that raises is visible to its author: a server process logs one warning line per crash naming the
session, the tool and the exception's type and message (its traceback at debug level), and both the client's error
and the episode's record name the exception's type. Secrets stay masked in all of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.ors_envs import call, create, math_task
from tests.records.helpers import episode
from tests.serving import free_port, wait_for_health

ROOT = Path(__file__).resolve().parent.parent
SECRET = "crash-secret-4c1d"


def test_a_raising_tool_is_one_warning_line_and_a_typed_error_in_the_answer_and_the_record(tmp_path: Path) -> None:
    port = free_port()
    script = (
        "from ors_server.http.server import Server\n"
        "from tests.ors_envs import MathLike\n"
        f"Server([MathLike], port={port}, log_level='debug', records={str(tmp_path / 'r.db')!r}).run()\n"
    )
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.DEVNULL, stderr=sink)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, process, log=log)
        with httpx.Client(base_url=url, timeout=30) as client:
            sid = create(client, math_task(), secrets={"token": SECRET})
            boom = call(client, sid, "boom", path="/mathlike/call")
            leak = call(client, sid, "leak", path="/mathlike/call")
            record = episode(client, sid, lambda e: len(e["calls"]) == 2)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert (boom[-1].name, boom[-1].data) == ("error", "RuntimeError: kaboom")
    assert (leak[-1].name, leak[-1].data) == ("error", "RuntimeError: cannot log in with ***")
    assert [c["error"] for c in record["calls"]] == ["RuntimeError: kaboom", "RuntimeError: cannot log in with ***"]

    lines = log.read_text().splitlines()
    warnings = [line for line in lines if " WARNING ors_server.calls " in line]
    assert len(warnings) == 2, lines
    assert warnings[0].endswith(
        f"session {sid}: tool 'boom' raised RuntimeError: kaboom (the traceback is logged at --log-level debug)"
    )
    assert f"session {sid}: tool 'leak' raised RuntimeError: cannot log in with ***" in warnings[1]
    text = log.read_text()
    assert (
        f"DEBUG ors_server.calls session {sid}: traceback of tool 'boom':\nTraceback (most recent call last):" in text
    )
    assert 'raise RuntimeError("kaboom")' in text
    assert SECRET not in text
