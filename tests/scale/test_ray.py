"""`ors-server serve --ray ADDRESS --workers 2` on a 2-node Ray cluster on this machine (one per module).

The cluster stays on loopback (Ray would otherwise advertise the host's outside address), with token auth
off so no `~/.ray/auth_token` is written; its processes are checked gone at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.faces.mcp_helpers import mcp_client, raw_initialize, text
from tests.scale.deployment import ROOT, Deployment, ids_on, owner, stop, wait_healthy
from tests.scale.test_workers import COUNTER, key, ors_session, sse_call
from tests.serving import free_port
from tests.test_loading import GUESS

ray = pytest.importorskip("ray", reason="the ray extra is part of the test extra")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.anyio, pytest.mark.timeout(600)]

RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",
    # Ray resolves "this node" through the outside interface unless told it is a single-machine cluster.
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
}
NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}


@dataclass
class RayDeployment:
    front: Deployment
    cluster: Any
    worker_node: Any


def ray_pids(cluster: Any) -> list[int]:
    nodes = [cluster.head_node, *cluster.worker_nodes]
    return [p.process.pid for node in nodes for procs in node.all_processes.values() for p in procs]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayDeployment]:
    saved = {name: os.environ.get(name) for name in RAY_ENV}
    os.environ.update(RAY_ENV)  # the cluster's processes (and so the worker actors) inherit these
    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    pids: list[int] = []
    try:
        worker_node = cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        pids = ray_pids(cluster)
        port = free_port()
        log = tmp_path_factory.mktemp("ray") / "front.log"
        # A user's own environment module, shipped to the nodes as the README shows: the working directory.
        project = tmp_path_factory.mktemp("project")
        (project / "guessing.py").write_text(GUESS)
        command = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port), "--workers", "2"]
        command += ["--ray", cluster.address, "--env", COUNTER, "--env", "guessing:Guess", "--log-level", "warning"]
        command += ["--ray-runtime-env", json.dumps({"working_dir": "."})]
        with log.open("wb") as output:
            process = subprocess.Popen(
                command, env=os.environ.copy(), stdout=output, stderr=subprocess.STDOUT, cwd=project
            )
        front = Deployment(f"http://127.0.0.1:{port}", process, log)
        try:
            wait_healthy(front)
            yield RayDeployment(front, cluster, worker_node)
        finally:
            stop(process)
    finally:
        cluster.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    # No Ray process outlives the module.
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert not left, f"Ray processes left behind: {left}"


def placement(deployed: RayDeployment) -> dict[str, str]:
    """Worker tag -> node id, asked of the controller from a short-lived driver of our own."""
    code = (
        f"import json, ray; ray.init(address={deployed.cluster.address!r}, namespace='ors-server', "
        "log_to_driver=False); "
        "print(json.dumps(ray.get(ray.get_actor('controller').nodes.remote()))); ray.shutdown()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, env=os.environ.copy())
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


async def test_workers_are_spread_over_both_nodes_and_an_episode_crosses_every_face(deployed):
    nodes = placement(deployed)
    assert len(nodes) == 2 and len(set(nodes.values())) == 2, nodes
    async with httpx.AsyncClient(base_url=deployed.front.url, timeout=60) as http:
        sids = [await ors_session(http, start=10) for _ in range(2)]
        assert {owner(sid) for sid in sids} == {0, 1}
        for sid in sids:
            first = await sse_call(http, sid, "increment")
            assert json.loads(first["output"]["blocks"][0]["text"]) == {"count": 11}
            async with mcp_client(f"{deployed.front.url}/counter/mcp", headers=key(sid)) as (session, _):
                second = await session.call_tool("increment", {"by": 2})
            assert json.loads(text(second)) == {"count": 13}
            reward = await http.get("/control/reward", headers={"mcp-session-id": sid})
            assert reward.json() == {"reward": 0.5, "step_count": 2}
        for worker in (0, 1):
            ep_id = ids_on(worker, 1, "ray-rollout")[0]
            opened = await raw_initialize(http, "/counter/mcp", {"session_id": ep_id, "seed": 1})
            assert opened.status_code == 200 and owner(opened.headers["mcp-session-id"]) == worker
            status = await http.get("/counter/control/status", headers={"mcp-session-id": ep_id})
            assert status.status_code == 200
        metrics = (await http.get("/metrics")).text
        assert 'worker="0"' in metrics and 'worker="1"' in metrics


async def test_an_environment_module_reaches_every_worker_through_the_runtime_env(deployed):
    async with httpx.AsyncClient(base_url=deployed.front.url, timeout=60) as http:
        rewards: dict[int, str] = {}
        while len(rewards) < 2:
            sid = (await http.post("/create_session")).json()["sid"]
            body = {"env_name": "guess", "split": "train", "index": 0}
            assert (await http.post("/create", json=body, headers=key(sid))).status_code == 200
            result = await sse_call(http, sid, "guess", {"guess": 3})
            rewards[owner(sid)] = result["output"]["reward"]
    assert rewards == {0: 1.0, 1: 1.0}


async def test_removing_a_node_fails_its_sessions_fast_and_leaves_the_other_worker_serving(deployed):
    nodes = placement(deployed)
    lost_worker = next(int(tag[1]) for tag, node in nodes.items() if node == deployed.worker_node.node_id)
    kept_worker = 1 - lost_worker
    async with httpx.AsyncClient(base_url=deployed.front.url, timeout=60) as http:
        by_worker: dict[int, str] = {}
        while len(by_worker) < 2:
            sid = await ors_session(http)
            by_worker.setdefault(owner(sid), sid)
        ep_lost = ids_on(lost_worker, 1, "ray-ep")[0]
        assert (await raw_initialize(http, "/counter/mcp", {"session_id": ep_lost})).status_code == 200

        removed = time.monotonic()
        deployed.cluster.remove_node(deployed.worker_node, allow_graceful=False)
        with anyio.fail_after(20):
            while True:
                try:
                    if (await http.post("/ping", headers=key(by_worker[lost_worker]))).status_code == 410:
                        break
                except httpx.TransportError:
                    pass  # a request in flight as its worker died is cut, as a proxy must
                await anyio.sleep(0.02)
        print(f"410 {time.monotonic() - removed:.3f} s after remove_node")
        lost = await http.get("/counter/control/status", headers={"mcp-session-id": ep_lost})
        assert lost.status_code in (404, 410) and "error" in lost.json()

        result = await sse_call(http, by_worker[kept_worker], "increment")
        assert json.loads(result["output"]["blocks"][0]["text"]) == {"count": 8}
        fresh = await ors_session(http)  # placed on the live worker
        assert owner(fresh) == kept_worker
        assert (await sse_call(http, fresh, "increment"))["ok"] is True
    assert deployed.front.process.poll() is None
