"""Harbor tasks under `--ray`: a 2-node Ray cluster on this machine, each worker actor with its own runtime (images
built into the node's storage, pools, containers); episodes solved through the front, nothing left at the end."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import uuid

import httpx
import pytest

from ors_server.sandboxes.podman import HARBOR_LABEL, OWNER_LABEL, Podman
from tests.harbor.harbor_helpers import TASKS, Episode, base_image_ready, harbor_dir, needs_podman, solution
from tests.harbor.test_cleanup import of_env
from tests.scale.deployment import Deployment, stop, wait_healthy
from tests.scale.ray_cluster import local_ray_cluster
from tests.serving import free_port

# Found, not imported: collection runs in every xdist worker, and Ray's import costs a second or more of CPU there.
if importlib.util.find_spec("ray") is None:
    pytest.skip("the ray extra is part of the test extra", allow_module_level=True)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]


def owners(env: str) -> set[str]:
    """The owner labels (worker processes) of the environment's containers."""
    done = Podman(harbor_dir()).run_sync(
        "ps",
        "--filter",
        f"label={HARBOR_LABEL}={env}/answer-file",
        "--format",
        f'{{{{index .Labels "{OWNER_LABEL}"}}}}',
    )
    return set(done.stdout.split())


def test_each_ray_worker_serves_harbor_episodes_from_containers_of_its_own(tmp_path):
    needs_podman()
    base_image_ready()
    env = f"tb{uuid.uuid4().hex[:8]}"
    with local_ray_cluster() as (cluster, _):
        port = free_port()
        command = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port), "--workers", "2"]
        command += ["--ray", cluster.address, "--env", f"harbor:{TASKS}?name={env}", "--records", "off"]
        command += ["--harbor-dir", str(harbor_dir()), "--harbor-pool", "0", "--log-level", "warning"]
        log = tmp_path / "front.log"
        with log.open("wb") as output:
            process = subprocess.Popen(command, env=dict(os.environ), stdout=output, stderr=subprocess.STDOUT)
        front = Deployment(f"http://127.0.0.1:{port}", process, log)
        try:
            wait_healthy(front, within=300)
            with httpx.Client(base_url=front.url, timeout=300) as client:
                episodes = [Episode(client, "answer-file", env=env) for _ in range(4)]
                for episode in episodes:
                    episode.bash(solution("answer-file"))
                assert len(of_env(env)) == 4
                assert len(owners(env)) == 2  # the containers of two worker actors, one on each node
                for episode in episodes:
                    assert episode.submit()["reward"] == 1.0
                    episode.delete()
        finally:
            stop(process)
    assert of_env(env) == []
