"""Harbor tasks written for the tests (`tasks/`), a server serving them, and an ORS episode driven over HTTP.

The containers' storage is kept across runs in `ORS_HARBOR_TEST_DIR` (default `~/.cache/ors-server-tests/harbor`),
so the Debian base image is made once per machine (about a minute) and the tasks' images are built once per
content; every test's containers are removed by the servers that started them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from ors_server import harbor
from ors_server.harbor.images import Images
from ors_server.http.app import create_app
from ors_server.sandboxes.owners import owner_id
from ors_server.sandboxes.podman import HARBOR_LABEL, OWNER_LABEL, Podman
from ors_server.settings import Settings
from tests.serving import serve

TASKS = Path(__file__).resolve().parent / "tasks"
TASK_NAMES = sorted(path.name for path in TASKS.iterdir() if (path / "task.toml").is_file())
ENV = "tb"
START_WAIT = 600.0
"""Seconds a first episode may wait for its image (the base image is made once per machine, in about a minute)."""


def harbor_dir() -> Path:
    configured = os.environ.get("ORS_HARBOR_TEST_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "ors-server-tests" / "harbor"


@functools.cache
def podman_problem() -> str | None:
    """Why Harbor tasks cannot run here, or None."""
    if shutil.which("podman") is None:
        return "podman is not installed (.ci/run installs it)"
    if os.geteuid() != 0:
        return "Harbor task containers need a root server (rootful podman)"
    done = Podman(harbor_dir()).run_sync("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout=120)
    if done.returncode != 0:
        return f"podman does not work here: {done.stderr.strip()[-300:]}"
    return None


def needs_podman() -> None:
    problem = podman_problem()
    if problem is not None:
        pytest.skip(problem)


@functools.cache
def base_image_ready() -> None:
    """Make the Debian base once per machine (cached in the test storage), before any server waits on it."""
    anyio.run(Images(Podman(harbor_dir()), {}).debian_base)


def harbor_env(path: Path = TASKS, name: str = ENV) -> type[harbor.HarborEnvironment]:
    return harbor.load(f"{path}?name={name}")


def settings(**overrides: Any) -> Settings:
    return Settings(**{"records": "off", "harbor_dir": str(harbor_dir()), "ready_wait": 30.0, **overrides})


@contextlib.contextmanager
def harbor_server(env_cls: type | None = None, **overrides: Any) -> Iterator[httpx.Client]:
    """A real server of the test tasks (a new environment class each time); yields an HTTP client on it."""
    needs_podman()
    base_image_ready()
    app = create_app([env_cls or harbor_env()], settings(**overrides))
    with serve(app) as url, httpx.Client(base_url=url, timeout=120) as client:
        yield client


def sse_end(text: str) -> tuple[str, Any]:
    """The last SSE event of an ORS call: ('end', its JSON) or ('error', its data)."""
    events = []
    for raw in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in raw.split("\n") if ": " in line and not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], fields.get("data", "")))
    event, data = events[-1]
    return event, json.loads(data) if event == "end" else data


class Episode:
    """One ORS session of a test task."""

    def __init__(self, client: httpx.Client, task: str, env: str = ENV, sid: str | None = None) -> None:
        self.client, self.env = client, env
        self.sid = sid or f"harbor-{uuid.uuid4().hex}"
        self.headers = {"X-Session-ID": self.sid}
        response = client.post("/create", json={"env_name": env, "task_spec": {"name": task}}, headers=self.headers)
        assert response.status_code == 200, response.text

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The call's `end` output; waits (bounded) while the episode's container is being made."""
        deadline = time.monotonic() + START_WAIT
        while True:
            body = {"name": name, "input": arguments}
            response = self.client.post(f"/{self.env}/call", json=body, headers=self.headers)
            if response.status_code != 503 or time.monotonic() > deadline:
                break
        assert response.status_code == 200, response.text
        event, data = sse_end(response.text)
        assert event == "end" and data["ok"], data
        return data["output"]

    def bash(self, command: str, **options: Any) -> dict[str, Any]:
        return self.call("bash", {"command": command, **options})

    def text(self, command: str, **options: Any) -> str:
        return self.bash(command, **options)["blocks"][0]["text"]

    def submit(self) -> dict[str, Any]:
        return self.call("submit", {})

    def delete(self) -> None:
        assert self.client.post("/delete", headers=self.headers).status_code == 200


def solution(task: str) -> str:
    return (TASKS / task / "solution" / "solve.sh").read_text()


def containers(owner: str | None = None, task: str | None = None) -> list[str]:
    """Ids of the Harbor containers in the test storage of `owner` (default: this process), of one task if given."""
    podman = Podman(harbor_dir())
    argv = ["ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={OWNER_LABEL}={owner or owner_id()}"]
    if task is not None:
        argv += ["--filter", f"label={HARBOR_LABEL}={task}"]
    done = podman.run_sync(*argv, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    """Poll an outside process's state (podman has no event to wait on here), bounded."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
