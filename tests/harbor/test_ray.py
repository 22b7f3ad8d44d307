"""Harbor tasks under `--ray`: a 2-node Ray cluster on this machine, each worker actor with its own runtime (images
built into the node's storage, pools, containers); episodes solved through the front, nothing left at the end."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from ors_server.sandboxes.podman import HARBOR_LABEL, OWNER_LABEL, Podman
from tests.harbor.harbor_helpers import TASKS, Episode, base_image_ready, harbor_dir, needs_podman, solution
from tests.harbor.test_cleanup import of_env
from tests.scale.deployment import Deployment, stop, wait_healthy
from tests.serving import free_port

# Found, not imported: collection runs in every xdist worker, and Ray's import costs a second or more of CPU there.
if importlib.util.find_spec("ray") is None:
    pytest.skip("the ray extra is part of the test extra", allow_module_level=True)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
}
NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}


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
    saved = {name: os.environ.get(name) for name in RAY_ENV}
    sigterm = signal.getsignal(signal.SIGTERM)
    os.environ.update(RAY_ENV)
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        cluster.add_node(**NODE)
        cluster.wait_for_nodes()
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
    finally:
        cluster.shutdown()
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert of_env(env) == []
