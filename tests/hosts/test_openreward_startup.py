"""The hosted `openreward` environment (quiz.py) as a server starts it: behind a front over two workers, each
hosting it; and the startup mistakes, each one line and exit code 2. Apart from test_openreward.py, whose shared
server these tests do not use, so pytest-xdist can run the two modules on two workers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from tests.clients import client_venvs
from tests.clients.harness import server_command
from tests.hosts.test_openreward import HERE, START_TIMEOUT, _ours

pytestmark = pytest.mark.clients


def test_two_workers_serve_it(openreward_python: Path, tmp_path: Path) -> None:
    with (
        _ours(openreward_python, tmp_path, "--workers", "2") as server,
        httpx.Client(base_url=server.url, timeout=120) as http,
    ):
        for n in range(4):  # the front places new sessions over both workers
            headers = {"X-Session-ID": f"w{n}"}
            created = http.post("/create", json={"env_name": "quiz", "split": "train", "index": 1}, headers=headers)
            assert created.status_code == 200, created.text
            call = http.post("/quiz/call", json={"name": "answer", "input": {"answer": "15"}}, headers=headers)
            assert '"reward":1.0' in call.text and '"finished":true' in call.text, call.text
            assert http.post("/delete", headers=headers).status_code == 200


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("openreward:quiz:Quiz@/nonexistent/python", "no interpreter '/nonexistent/python'"),
        ("openreward:no_such_module:Quiz@{py}", "no module 'no_such_module'"),
        ("openreward:quiz:Answer@{py}", "is not an openreward.environments.Environment subclass"),
        ("openreward:quiz:Quiz", "this interpreter has no openreward package"),  # the server's own, by default
    ],
)
def test_startup_mistakes_are_one_line_and_exit_2(openreward_python: Path, spec: str, says: str) -> None:
    argv = [*server_command(), "serve", "--port", "0", "--env", spec.replace("{py}", str(openreward_python))]
    env = {**client_venvs.clean_env(), "PYTHONPATH": str(HERE.parents[1])}
    done = subprocess.run(argv, cwd=HERE, env=env, capture_output=True, text=True, timeout=START_TIMEOUT)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
