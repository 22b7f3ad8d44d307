"""The machinery of the black-box client tests: a real `ors-server serve` subprocess, and client scripts
run with a client venv's python.

Each script in `scripts/` prints one line `ORS-CLIENT-RESULT <json>` that the tests assert on.
Everything else it prints (EP prints progress on stdout) is shown only when a test fails, together
with the tail of the server's log.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clients import client_venvs
from tests.serving import PortTaken, free_port, wait_for_health

SCRIPTS = Path(__file__).resolve().parent / "scripts"
RESULT_PREFIX = "ORS-CLIENT-RESULT "

SERVER_START_TIMEOUT = 180.0
"""A bound, not an expectation: a healthy server answers in seconds, but when pytest-xdist starts the slowest modules
together on a loaded 2-core machine an import can take a minute."""
SERVER_STOP_TIMEOUT = 45.0
"""Above the default shutdown grace (10 s) plus time to tear sessions down."""
LOOPBACK = "127.0.0.1,localhost"


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def server_command() -> list[str]:
    # The console script installed beside this interpreter, so the tests drive the checkout under test.
    beside = Path(sys.executable).parent / "ors-server"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ors-server")
    return [found] if found else [sys.executable, "-m", "ors_server.cli"]


def _healthy(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def run_server(log_dir: Path, *args: str, cwd: Path | None = None) -> Iterator[Server]:
    """`ors-server serve --port <free port> *args` (started in `cwd`) as a subprocess until the block ends,
    then SIGTERM."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(PORT_ATTEMPTS):
        port = free_port()
        log_path = log_dir / f"server-{port}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [*server_command(), "serve", "--port", str(port), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
            )
        server = Server(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
        try:
            wait_for_health(
                server.url, process, within=SERVER_START_TIMEOUT, what="ors-server", log=log_path, own_port=True
            )
            break
        except PortTaken:
            if attempt == PORT_ATTEMPTS - 1:
                raise
        except BaseException:
            _stop(process)
            raise
    try:
        yield server
    finally:
        killed = _stop(process)
    if killed:  # a hung shutdown is a finding even when the test itself passed
        raise RuntimeError(
            f"ors-server ignored SIGTERM for {SERVER_STOP_TIMEOUT} s and was killed:\n{server.log_tail()}"
        )


PORT_ATTEMPTS = 3
"""Starts of a server whose free port another test took first."""


def _stop(process: subprocess.Popen[bytes]) -> bool:
    """SIGTERM, a bounded wait, then SIGKILL; True if it had to be killed."""
    if process.poll() is not None:
        return False
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=SERVER_STOP_TIMEOUT)
        return False
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=SERVER_STOP_TIMEOUT)
        return True


def client_env(home: Path) -> dict[str, str]:
    env = client_venvs.clean_env()
    env.update(
        HOME=str(home),  # EP writes ~/.eval_protocol: keep it out of the developer's home
        OPENREWARD_DISABLE_UPDATE_CHECK="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",  # else litellm fetches its cost map at import
        DISABLE_EP_SQLITE_LOG="1",
        NO_PROXY=LOOPBACK,  # aiohttp and httpx both trust the environment's proxy settings
        no_proxy=LOOPBACK,
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def run_script(
    python: Path,
    script: str,
    *args: str,
    home: Path,
    server: Server | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> dict:
    """Run `scripts/<script> *args` with `python` (and `env` added to its environment); return the JSON it
    reported, or fail the test."""
    home.mkdir(parents=True, exist_ok=True)
    cmd = [str(python), str(SCRIPTS / script), *args]
    environment = {**client_env(home), **(env or {})}
    try:
        done = subprocess.run(
            cmd, cwd=home, env=environment, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{script} did not finish within {timeout} s\n"
            f"--- stdout ---\n{_tail(exc.stdout)}\n--- stderr ---\n{_tail(exc.stderr)}{_server_log(server)}"
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        pytest.fail(
            f"{script} exited {done.returncode} {'with' if lines else 'without'} a result\n"
            f"--- stdout ---\n{_tail(done.stdout)}\n--- stderr ---\n{_tail(done.stderr)}{_server_log(server)}"
        )
    return json.loads(lines[-1].removeprefix(RESULT_PREFIX))


def _tail(text: str | bytes | None, chars: int = 6000) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-chars:]


def _server_log(server: Server | None) -> str:
    return "" if server is None else f"\n--- server log ---\n{server.log_tail()}"


def assert_math_episodes(result: dict) -> None:
    """What both ORS clients must see of the `math` environment (scripts/_episodes.py)."""
    assert result["splits"] == ["train", "test"]
    [submit] = result["tools"]
    assert set(submit) == {"name", "description", "input_schema"}
    assert submit["name"] == "submit"
    assert submit["input_schema"]["required"] == ["answer"]
    assert {"type": "string"} in submit["input_schema"]["properties"]["answer"]["anyOf"]  # or a number
    assert result["tasks"]["count"] == result["num_tasks"] > 1
    assert result["tasks"]["environment_names"] == ["math"]
    assert {"question", "answer"} <= set(result["tasks"]["first"])

    by_task = result["by_task"]
    assert by_task["tools"] == ["submit"]
    assert by_task["prompt"][0]["type"] == "text"
    assert result["tasks"]["first"]["question"] in by_task["prompt"][0]["text"]
    assert by_task["correct"]["reward"] == 1.0
    assert by_task["correct"]["finished"] is True
    assert by_task["correct"]["blocks"][0]["type"] == "text"
    assert by_task["after_finish"]["error"]["type"] == "ToolCallError"

    by_index = result["by_index"]
    assert result["task_1"]["task_spec"]["question"] in by_index["prompt"][0]["text"]
    assert by_index["wrong"]["reward"] == 0.0
    assert by_index["wrong"]["finished"] is True

    mistakes = result["mistakes"]
    for mistake in ("unknown_tool", "bad_input", "missing_input"):
        assert mistakes[mistake]["error"]["type"] == "ToolCallError", mistakes[mistake]
    assert mistakes["then_correct"] == by_task["correct"], "a client mistake must cost neither session nor episode"

    episodes = ("by_task", "by_index", "mistakes")
    for episode in episodes:
        assert result[episode]["ping_after_exit"] in (404, 410), f"{episode}: the session outlived the client"
    assert len({result[episode]["sid"] for episode in episodes}) == len(episodes)
    if result["live_sessions_after"] is not None:  # the server publishes the count at /metrics
        assert by_task["live_sessions_during"] == 1
        assert result["live_sessions_after"] == 0, "the client's sessions outlived it"
