"""Harbor tasks: create-to-first-command and the `bash` round trip through the server, against plain podman.

    python bench/harbor.py [--episodes 20] [--calls 50] [--pool 1] [--harbor-dir DIR]

One run, one image (the test task `answer-file`, built if it is not), measured on the same machine:

- server, create to first command: ORS `/create`, then `bash {"command": "true"}` until it answers, over real HTTP,
  with a warm pool (`--pool`) that is full before each episode starts (the pool refills between episodes);
- server, bash round trip: `bash true` calls in one episode (one shell kept open in the container);
- podman, create to first command: `podman run -d` then `podman exec CID true` (what a server without a pool or a
  kept shell would do per episode), with the same limits and the same configuration;
- podman, exec round trip: `podman exec CID true` in a running container.

Prints each median (and p90) and the ratio podman / server.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

import anyio
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ors_server import harbor  # noqa: E402
from ors_server.harbor.runtime import HarborRuntime  # noqa: E402
from ors_server.http.app import create_app  # noqa: E402
from ors_server.sandboxes.container import run_argv  # noqa: E402
from ors_server.sandboxes.podman import Podman  # noqa: E402
from ors_server.settings import Settings  # noqa: E402
from tests.serving import serve  # noqa: E402

TASK = "answer-file"


def quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def first_answer(client: httpx.Client, sid: str) -> None:
    body = {"name": "bash", "input": {"command": "true"}}
    while True:
        answer = client.post("/tb/call", json=body, headers={"X-Session-ID": sid})
        if answer.status_code != 503:
            assert answer.status_code == 200 and '"ok":true' in answer.text, answer.text
            return


def server_figures(env_cls: type[harbor.HarborEnvironment], settings: Settings, episodes: int, calls: int):
    app = create_app([env_cls], settings)
    creates, trips = [], []
    with serve(app) as url, httpx.Client(base_url=url, timeout=300) as client:
        for _ in range(episodes):
            runtime = env_cls.runtime
            assert runtime is not None
            deadline = time.monotonic() + 600
            while (pool := runtime.pools.get(TASK)) is None or len(pool.ready) < pool.size:
                assert time.monotonic() < deadline, "the pool did not fill"
                time.sleep(0.05)
            sid = f"bench-{uuid.uuid4().hex}"
            started = time.perf_counter()
            created = client.post(
                "/create", json={"env_name": "tb", "task_spec": {"name": TASK}}, headers={"X-Session-ID": sid}
            )
            assert created.status_code == 200, created.text
            first_answer(client, sid)
            creates.append(time.perf_counter() - started)
            if not trips:
                for _ in range(calls):
                    began = time.perf_counter()
                    first_answer(client, sid)
                    trips.append(time.perf_counter() - began)
            client.post("/delete", headers={"X-Session-ID": sid})
    return creates, trips


def podman_figures(podman: Podman, image: str, runtime: HarborRuntime, episodes: int, calls: int):
    task = runtime.tasks[TASK]
    argv = run_argv(image, runtime.limits(task), {"ors-server.bench": "1"}, {}, None)
    creates, trips = [], []
    for index in range(episodes):
        started = time.perf_counter()
        cid = podman.run_sync(*argv, timeout=120).stdout.strip()
        done = podman.run_sync("exec", cid, "true", timeout=120)
        creates.append(time.perf_counter() - started)
        assert done.returncode == 0, done.stderr
        if index == 0:
            for _ in range(calls):
                began = time.perf_counter()
                podman.run_sync("exec", cid, "true", timeout=120)
                trips.append(time.perf_counter() - began)
        podman.run_sync("rm", "--force", "--time", "0", cid, timeout=120)
    return creates, trips


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--pool", type=int, default=1)
    parser.add_argument("--harbor-dir", default=None)
    args = parser.parse_args()
    env_cls = harbor.load(f"{ROOT / 'tests' / 'harbor' / 'tasks'}?name=tb")
    settings = Settings(records="off", harbor_pool=args.pool, harbor_dir=args.harbor_dir, ready_wait=300.0)
    runtime = HarborRuntime("tb", env_cls.harbor_tasks, settings)
    image = anyio.run(runtime.image, runtime.tasks[TASK])
    base_creates, base_trips = podman_figures(runtime.podman, image, runtime, args.episodes, args.calls)
    ours_creates, ours_trips = server_figures(env_cls, settings, args.episodes, args.calls)
    rows = [
        ("create to first command", quantiles(ours_creates), quantiles(base_creates)),
        ("bash round trip", quantiles(ours_trips), quantiles(base_trips)),
    ]
    print(f"image {image}, pool {args.pool}, {args.episodes} episodes, {args.calls} calls")
    print(f"{'':26} {'server median (p90)':>22} {'podman median (p90)':>22} {'podman/server':>14}")
    for name, (ours, ours90), (base, base90) in rows:
        print(
            f"{name:26} {ours * 1000:>9.1f} ms ({ours90 * 1000:6.1f}) {base * 1000:>9.1f} ms ({base90 * 1000:6.1f})"
            f" {base / ours:>13.1f}x"
        )


if __name__ == "__main__":
    main()
