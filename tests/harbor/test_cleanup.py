"""No container outlives its session: delete, the reaper, SIGTERM, and SIGKILL of the server (then the next start);
the warm pool refills after a take; images are built once per content."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx

from ors_server.harbor import HarborEnvironment
from ors_server.harbor.images import Images
from ors_server.harbor.tasks import read_task
from ors_server.sandboxes.podman import HARBOR_LABEL, Podman
from tests.harbor.harbor_helpers import (
    TASKS,
    Episode,
    base_image_ready,
    harbor_dir,
    harbor_env,
    harbor_server,
    needs_podman,
    wait_for,
)
from tests.serving import free_port

ROOT = Path(__file__).resolve().parents[2]


def of_env(env: str, task: str = "answer-file") -> list[str]:
    """Ids of every container (any owner) of `task` in environment `env`."""
    done = Podman(harbor_dir()).run_sync(
        "ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={HARBOR_LABEL}={env}/{task}", timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def unique_env() -> str:
    return f"tb{uuid.uuid4().hex[:8]}"


def ready_in_pool(env_cls: type[HarborEnvironment], task: str = "answer-file") -> list[str]:
    """Ids of the task's containers that its warm pool holds ready (shell open)."""
    runtime = env_cls.runtime
    pool = runtime.pools.get(task) if runtime is not None else None
    return [container.id for container in pool.ready] if pool is not None else []


def test_a_session_takes_a_warm_container_the_pool_replaces_it_and_delete_removes_it():
    env = unique_env()
    env_cls = harbor_env(name=env)
    with harbor_server(env_cls, harbor_pool=1) as client:
        wait_for(lambda: len(ready_in_pool(env_cls)) == 1, 60, "the pool's container")
        [warm] = ready_in_pool(env_cls)
        episode = Episode(client, "answer-file", env=env)
        hostname = episode.text("cat /etc/hostname").split("stdout:\n")[1].strip()
        assert warm.startswith(hostname)  # podman names a container's host after its id: the session got the warm one
        wait_for(lambda: len(ready_in_pool(env_cls)) == 1, 60, "the pool to refill")
        assert warm not in ready_in_pool(env_cls) and len(of_env(env)) == 2
        episode.delete()
        wait_for(lambda: warm not in of_env(env), 30, "the session's container to go")
        assert of_env(env) == ready_in_pool(env_cls)
    assert of_env(env) == []  # the server's end removed the pool's


def test_a_reaped_sessions_container_is_removed():
    env = unique_env()
    with harbor_server(harbor_env(name=env), harbor_pool=0, session_timeout=4.0) as client:
        episode = Episode(client, "answer-file", env=env)
        assert "exit code: 0" in episode.text("true")
        assert len(of_env(env)) == 1
        wait_for(lambda: of_env(env) == [], 30, "the reaper to remove the container")
        assert client.post("/ping", headers=episode.headers).status_code == 410


@contextlib.contextmanager
def server_process(env: str, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], httpx.Client]]:
    """`ors-server serve --env harbor:TASKS?name=ENV` as a process of its own."""
    needs_podman()
    base_image_ready()
    port = free_port()
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("ORS_API_KEY", None)
    command = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port), "--records", "off"]
    command += ["--env", f"harbor:{TASKS}?name={env}", "--harbor-dir", str(harbor_dir()), *args]
    process = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:

            def healthy() -> bool:
                assert process.poll() is None, "the server exited at start"
                try:
                    return client.get("/health").status_code == 200
                except httpx.TransportError:
                    return False

            wait_for(healthy, 90, "the server to start")
            yield process, client
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)


def test_sigterm_ends_the_server_with_every_container_removed():
    env = unique_env()
    with server_process(env, "--harbor-pool", "1") as (process, client):
        episodes = [Episode(client, "answer-file", env=env) for _ in range(2)]
        for episode in episodes:
            assert "exit code: 0" in episode.text("true")
        wait_for(lambda: len(of_env(env)) == 3, 60, "two sessions' containers and the pool's")
        process.send_signal(signal.SIGTERM)
        # uvicorn re-raises the signal once it has shut down, so the exit status may be SIGTERM's.
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)
    assert of_env(env) == []


def test_the_containers_of_a_server_killed_with_sigkill_are_removed_at_the_next_start():
    env = unique_env()
    with server_process(env, "--harbor-pool", "0") as (process, client):
        episode = Episode(client, "answer-file", env=env)
        assert "exit code: 0" in episode.text("true")
        process.kill()
        process.wait(timeout=60)
    assert len(of_env(env)) == 1  # nothing ran to remove it
    with server_process(unique_env(), "--harbor-pool", "0"):
        assert of_env(env) == []  # removed at startup, before the server answered


def test_an_image_is_built_once_per_content_and_a_changed_file_builds_another(tmp_path):
    needs_podman()
    base_image_ready()
    task_dir = tmp_path / f"cached-{uuid.uuid4().hex[:8]}"
    shutil.copytree(TASKS / "column-sum", task_dir)
    images = Images(Podman(harbor_dir()), {})
    podman = Podman(harbor_dir())

    def created(tag: str) -> str:
        return podman.run_sync("image", "inspect", "--format", "{{.Created}}", tag).stdout

    first = anyio.run(images.for_task, read_task(task_dir))
    again = anyio.run(Images(Podman(harbor_dir()), {}).for_task, read_task(task_dir))  # as after a restart
    assert again == first and created(again) == created(first)
    (task_dir / "environment" / "numbers.csv").write_text("value\n1\n")
    changed = anyio.run(images.for_task, read_task(task_dir))
    assert changed != first
    for tag in (first, changed):
        podman.run_sync("rmi", "--force", tag)
