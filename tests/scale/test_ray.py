"""`ors-server serve --ray ADDRESS --workers 2` on a 2-node Ray cluster on this machine (one per module).

The cluster stays on loopback (Ray would otherwise advertise the host's outside address), with token auth
off so no `~/.ray/auth_token` is written; its processes are checked gone at the end.
"""

from __future__ import annotations

import contextlib
import importlib.util
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

from ors_server.ids import WorkerTag
from tests.faces.mcp_helpers import ACCEPT, mcp_client, raw_initialize, text
from tests.scale.deployment import Deployment, live_sessions, minted_by, stop, wait_healthy
from tests.scale.ray_cluster import local_ray_cluster
from tests.scale.test_placement import hashing_to_worker_0
from tests.scale.test_workers import COUNTER, key, ors_session, sse_call
from tests.serving import free_port
from tests.test_loading import GUESS

# On one machine every node sees the driver's directory (Ray hands workers the driver's sys.path), so the module
# shipped to the workers needs something only the deployment's runtime_env gives them: GUESS_SHIPPED.
SHIPPED_GUESS = (
    "import os\n\nif os.environ.get('GUESS_SHIPPED') != '1':\n"
    "    raise ImportError('GUESS_SHIPPED is not set: not the deployment runtime_env')\n" + GUESS
)

# Found, not imported: collection runs in every xdist worker, and Ray's import costs a second or more of CPU there.
if importlib.util.find_spec("ray") is None:
    pytest.skip("the ray extra is part of the test extra", allow_module_level=True)

pytestmark = [pytest.mark.ray, pytest.mark.anyio, pytest.mark.timeout(600)]

RAY_START_TIMEOUT = 240.0


@dataclass
class RayDeployment:
    front: Deployment
    cluster: Any
    worker_node: Any
    project: Path  # the front's working directory: the module shipped to the nodes
    guess_url: str  # guessing:Guess's own port (`--env-port`), where requests that name no environment mean it


def ray_pids(cluster: Any) -> list[int]:
    nodes = [cluster.head_node, *cluster.worker_nodes]
    return [p.process.pid for node in nodes for procs in node.all_processes.values() for p in procs]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayDeployment]:
    pids: list[int] = []
    with local_ray_cluster() as (cluster, worker_node):
        pids = ray_pids(cluster)
        port, guess_port = free_port(), free_port()
        log = tmp_path_factory.mktemp("ray") / "front.log"
        # A user's own environment module, shipped to the nodes as the README shows: the working directory.
        project = tmp_path_factory.mktemp("project")
        (project / "guessing.py").write_text(SHIPPED_GUESS)
        command = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port), "--workers", "2"]
        command += ["--ray", cluster.address, "--env", COUNTER, "--env", "guessing:Guess", "--log-level", "warning"]
        command += ["--env-port", f"guess={guess_port}"]
        command += ["--ray-runtime-env", json.dumps({"working_dir": ".", "env_vars": {"GUESS_SHIPPED": "1"}})]
        with log.open("wb") as output:
            driver = {**os.environ, "GUESS_SHIPPED": "1"}
            process = subprocess.Popen(command, env=driver, stdout=output, stderr=subprocess.STDOUT, cwd=project)
        front = Deployment(f"http://127.0.0.1:{port}", process, log)
        try:
            # Its workers are Ray actors, started after the cluster's own processes: on a machine busy with the
            # rest of the suite (pytest-xdist workers) that takes longer than a local deployment's bound.
            wait_healthy(front, within=RAY_START_TIMEOUT)
            yield RayDeployment(front, cluster, worker_node, project, f"http://127.0.0.1:{guess_port}")
        finally:
            stop(process)
    # No Ray process outlives the module.
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert not left, f"Ray processes left behind: {left}"


async def counts(http: httpx.AsyncClient) -> dict[int, int]:
    return live_sessions((await http.get("/metrics")).text)


async def made_on(http: httpx.AsyncClient, make: Any) -> tuple[Any, int]:
    """What `await make` (a coroutine, not yet started) returns, and the worker that gained a session meanwhile
    (by the workers' metrics)."""
    before = await counts(http)
    made = await make
    after = await counts(http)
    gained = [w for w in after if after[w] > before.get(w, 0)]
    assert len(gained) == 1, (before, after)
    return made, gained[0]


@contextlib.contextmanager
def second_front(deployed: RayDeployment, tmp_path: Path) -> Iterator[Deployment]:
    """Another front on its own port, attached to the same controller (as on another node)."""
    port = free_port()
    log = tmp_path / "front-2.log"
    command = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(port), "--workers", "2"]
    # The deployment's own --env flags (a front asking for others is refused), from the directory it ships.
    command += ["--ray", deployed.cluster.address, "--env", COUNTER, "--env", "guessing:Guess"]
    command += ["--log-level", "warning"]
    command += ["--ray-runtime-env", json.dumps({"working_dir": ".", "env_vars": {"GUESS_SHIPPED": "1"}})]
    with log.open("wb") as output:
        driver = {**os.environ, "GUESS_SHIPPED": "1"}
        process = subprocess.Popen(command, env=driver, stdout=output, stderr=subprocess.STDOUT, cwd=deployed.project)
    front = Deployment(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_healthy(front)
        yield front
    finally:
        stop(process)


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
        before = await counts(http)
        sids = [await ors_session(http, start=10) for _ in range(2)]
        after = await counts(http)
        assert {w: after[w] - before.get(w, 0) for w in after} == {0: 1, 1: 1}
        for sid in sids:
            first = await sse_call(http, sid, "increment")
            assert json.loads(first["output"]["blocks"][0]["text"]) == {"count": 11}
            async with mcp_client(f"{deployed.front.url}/counter/mcp", headers=key(sid)) as (session, _):
                second = await session.call_tool("increment", {"by": 2})
            assert json.loads(text(second)) == {"count": 13}
            reward = await http.get("/control/reward", headers={"mcp-session-id": sid})
            assert reward.json() == {"reward": 0.5, "step_count": 2}
        for worker in (0, 1):
            ep_id = f"ray-rollout-{worker}"
            opened, placed = await made_on(http, raw_initialize(http, "/counter/mcp", {"session_id": ep_id, "seed": 1}))
            assert opened.status_code == 200 and minted_by(opened.headers["mcp-session-id"]) == placed
            status = await http.get("/counter/control/status", headers={"mcp-session-id": ep_id})
            assert status.status_code == 200
        metrics = (await http.get("/metrics")).text
        assert 'worker="0"' in metrics and 'worker="1"' in metrics
        # Both workers, one per node, record into the one records file the deployment was given (the tests'
        # $ORS_RECORDS, made absolute by the CLI); any worker answers /episodes through the front.
        with anyio.fail_after(30):
            while True:
                listed = {e["id"]: e for e in (await http.get("/episodes", params={"limit": 500})).json()["episodes"]}
                if all(sid in listed and listed[sid]["steps"] == 2 for sid in sids):
                    break
                await anyio.sleep(0.1)
        assert {listed[sid]["face"] for sid in sids} == {"ors"}


async def test_an_environment_module_reaches_every_worker_through_the_runtime_env(deployed):
    async with httpx.AsyncClient(base_url=deployed.front.url, timeout=60) as http:
        rewards: dict[int, str] = {}
        while len(rewards) < 2:
            sid = (await http.post("/create_session")).json()["sid"]
            body = {"env_name": "guess", "split": "train", "index": 0}
            created, placed = await made_on(http, http.post("/create", json=body, headers=key(sid)))
            assert created.status_code == 200
            result = await sse_call(http, sid, "guess", {"guess": 3})
            rewards[placed] = result["output"]["reward"]
    assert rewards == {0: 1.0, 1: 1.0}


async def test_the_ray_front_listens_on_an_environment_port_and_its_workers_serve_that_environment(deployed):
    async with httpx.AsyncClient(base_url=deployed.guess_url, timeout=60) as http:
        tools = (await http.get("/tools")).json()["tools"]  # bare: guess, not the first environment (counter)
        assert [tool["name"] for tool in tools] == ["guess"]
        rewards: dict[int, float] = {}
        while len(rewards) < 2:
            sid = (await http.post("/create_session")).json()["sid"]
            created, placed = await made_on(
                http, http.post("/create", json={"split": "train", "index": 0}, headers=key(sid))
            )
            assert created.status_code == 200, created.text
            rewards[placed] = (await sse_call(http, sid, "guess", {"guess": 3}))["output"]["reward"]
    assert rewards == {0: 1.0, 1: 1.0}


async def test_client_chosen_ids_are_placed_by_load_and_driven_through_either_front(deployed, tmp_path):
    with second_front(deployed, tmp_path) as other:
        async with (
            httpx.AsyncClient(base_url=deployed.front.url, timeout=60) as a,
            httpx.AsyncClient(base_url=other.url, timeout=60) as b,
        ):
            # Ids the old hash rule sent all to worker 0: spread 2:2, whichever front creates them.
            ids = hashing_to_worker_0(f"ray-chosen-{time.monotonic_ns()}", 4)
            before = await counts(a)
            for index, sid in enumerate(ids):
                body = {"env_name": "counter", "task_spec": {"start": index}}
                assert (await (a, b)[index % 2].post("/create", json=body, headers=key(sid))).status_code == 200
            after = await counts(b)
            assert {w: after[w] - before.get(w, 0) for w in after} == {0: 2, 1: 2}
            # Each is driven through the front that did not create it.
            for index, sid in enumerate(ids):
                result = await sse_call((b, a)[index % 2], sid, "increment", {"by": 1})
                assert json.loads(result["output"]["blocks"][0]["text"]) == {"count": index + 1}
            # An Eval Protocol episode opened through one front, read and stepped through the other.
            row = f"ray-row-{time.monotonic_ns()}"
            opened = await raw_initialize(a, "/counter/mcp", {"session_id": row, "seed": 2})
            assert opened.status_code == 200
            stepped = await b.post(
                "/counter/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "increment"}},
                headers={"mcp-session-id": opened.headers["mcp-session-id"], **ACCEPT},
            )
            assert stepped.status_code == 200, stepped.text
            status = await b.get("/counter/control/status", headers={"mcp-session-id": row})
            assert status.json()["step_count"] == 1
            # A forged tag naming a worker incarnation that never lived pins nothing: the session is made.
            forged = WorkerTag(0, 99).tag("ray-forged")
            created = await a.post("/create", json={"env_name": "counter", "task_spec": {}}, headers=key(forged))
            assert created.status_code == 200, created.text
            assert (await b.post("/ping", headers=key(forged))).status_code == 200
            for sid in [*ids, row, forged]:
                await a.post("/delete", headers=key(sid))


def test_a_module_that_does_not_load_on_the_nodes_is_one_line_and_exit_2(deployed, tmp_path):
    """The driver loads `guessing`; in a runtime_env without what it needs, the workers could not."""
    (tmp_path / "guessing.py").write_text(SHIPPED_GUESS)
    command = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(free_port()), "--workers", "2"]
    command += ["--ray", deployed.cluster.address, "--env", "guessing:Guess"]
    command += ["--ray-runtime-env", json.dumps({"env_vars": {"SOMETHING_ELSE": "1"}})]
    driver = {**os.environ, "GUESS_SHIPPED": "1"}
    done = subprocess.run(command, cwd=tmp_path, env=driver, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ors-server: on the Ray cluster: --env 'guessing:Guess': importing module 'guessing' failed: "
        "ImportError: GUESS_SHIPPED is not set"
    ), last
    assert last.endswith("(a worker's node needs the module: --ray-runtime-env)")


def test_a_front_asking_for_another_deployment_is_one_line_and_exit_2(deployed):
    """The cluster runs 2 workers: a front asking for 3 would route to a slot no worker fills."""
    command = [sys.executable, "-m", "ors_server.cli", "serve", "--port", str(free_port()), "--workers", "3"]
    command += ["--ray", deployed.cluster.address, "--env", COUNTER]
    done = subprocess.run(command, env=os.environ.copy(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ors-server: the Ray cluster already runs a deployment with --workers 2 and --env "), last
    assert last.endswith("start this front with the same flags, or stop every front of that deployment first")
    with httpx.Client(base_url=deployed.front.url) as http:  # the running deployment did not notice
        assert http.get("/health").status_code == 200


async def test_removing_a_node_fails_its_sessions_fast_and_leaves_the_other_worker_serving(deployed):
    nodes = placement(deployed)
    lost_worker = next(int(tag[1]) for tag, node in nodes.items() if node == deployed.worker_node.node_id)
    kept_worker = 1 - lost_worker
    async with httpx.AsyncClient(base_url=deployed.front.url, timeout=60) as http:
        by_worker: dict[int, str] = {}
        while len(by_worker) < 2:
            sid, placed = await made_on(http, ors_session(http))
            by_worker.setdefault(placed, sid)
        ep_lost, placed = "", -1
        while placed != lost_worker:
            ep_lost = f"ray-ep-{time.monotonic_ns()}"
            opened, placed = await made_on(http, raw_initialize(http, "/counter/mcp", {"session_id": ep_lost}))
            assert opened.status_code == 200

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
        fresh, placed = await made_on(http, ors_session(http))  # placed on the live worker
        assert placed == kept_worker
        assert (await sse_call(http, fresh, "increment"))["ok"] is True
    assert deployed.front.process.poll() is None
