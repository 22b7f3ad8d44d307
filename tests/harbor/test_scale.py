"""Harbor tasks behind `--workers` and `--fronts`: each worker runs its own pool and containers, episodes are
placed and played through the front, and a worker killed with SIGKILL loses its containers when it is replaced."""

from __future__ import annotations

import os
import signal
import uuid

import httpx

from tests.harbor.harbor_helpers import TASKS, Episode, base_image_ready, harbor_dir, needs_podman, solution, wait_for
from tests.harbor.test_cleanup import of_env
from tests.scale.deployment import deployment


def serve_args(env: str, *more: str) -> list[str]:
    return ["--env", f"harbor:{TASKS}?name={env}", "--harbor-dir", str(harbor_dir()), "--records", "off", *more]


def test_episodes_through_two_workers_and_two_fronts_are_solved_and_leave_no_container(tmp_path):
    needs_podman()
    base_image_ready()
    env = f"tb{uuid.uuid4().hex[:8]}"
    with deployment(tmp_path, *serve_args(env, "--harbor-pool", "1"), workers=2, fronts=2) as running:
        with httpx.Client(base_url=running.url, timeout=300) as client:
            episodes = [Episode(client, "answer-file", env=env) for _ in range(4)]
            holders = {running.holder(episode.sid) for episode in episodes}
            for episode in episodes:
                episode.bash(solution("answer-file"))
                assert episode.submit()["reward"] == 1.0
            assert holders == {0, 1}  # placed on both workers, each with containers of its own
            for episode in episodes:
                episode.delete()
    assert of_env(env) == []


def test_a_worker_killed_with_sigkill_loses_its_containers_when_it_is_replaced(tmp_path):
    needs_podman()
    base_image_ready()
    env = f"tb{uuid.uuid4().hex[:8]}"
    with deployment(tmp_path, *serve_args(env, "--harbor-pool", "0"), workers=2) as running:
        with httpx.Client(base_url=running.url, timeout=300) as client:
            episode = Episode(client, "answer-file", env=env)
            assert "exit code: 0" in episode.text("true")
            worker = running.holder(episode.sid)
            assert worker is not None
            [mine] = of_env(env)
            os.kill(running.worker_pids()[worker], signal.SIGKILL)
            # The supervisor starts a new worker in its slot; at its start it removes what the dead one left.
            wait_for(lambda: mine not in of_env(env), 120, "the dead worker's container to be removed")
    assert of_env(env) == []
