"""The official clients, unchanged, against `ors-server serve --workers 2`: every session reaches its owner."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.harness import Server, assert_math_episodes, run_script, run_server
from tests.clients.test_eval_protocol_client import CONTROL_PLANE, scenario
from tests.scale.deployment import deployment

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with run_server(tmp_path_factory.mktemp("front"), "--workers", "2") as running:
        yield running


def sessions_created_per_worker(front: Server) -> dict[str, float]:
    with urllib.request.urlopen(f"{front.url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.findall(r'ors_sessions_total\{worker="(\d+)",event="created"\} ([0-9.e+]+)', text)
    return {worker: float(count) for worker, count in found}


def test_openreward_and_ors_sdk_clients_play_through_the_front_on_both_workers(openreward_python, front, run_client):
    for script in ("openreward_episode.py", "ors_sdk_episode.py"):
        args = (front.url, "math", "math") if script == "openreward_episode.py" else (front.url, "math")
        assert_math_episodes(run_client(openreward_python, script, *args, server=front))
    created = sessions_created_per_worker(front)
    assert created.keys() == {"0", "1"} and all(count > 0 for count in created.values()), created


def test_openreward_client_with_the_api_key_plays_through_the_front(openreward_python, start_server, run_client):
    server = start_server("--workers", "2", "--api-key", "s3cret-key")
    key = {"ORS_TEST_API_KEY": "s3cret-key"}
    result = run_client(openreward_python, "openreward_episode.py", server.url, "math", "math", server=server, env=key)
    assert_math_episodes(result)


def test_eval_protocol_rollouts_play_through_the_front(eval_protocol_python, front, tmp_path):
    before = sessions_created_per_worker(front)
    rollouts = run_script(
        eval_protocol_python, "ep_rollout.py", front.url, "frozen_lake", "concurrent",
        home=tmp_path / "home", server=front, timeout=240,
    )  # fmt: skip
    row = scenario(rollouts, "frozen_lake")
    assert (row["steps"], row["total_reward"], row["termination_reason"]) == (6, 1.0, "stop")
    rows = scenario(rollouts, "concurrent")
    assert sorted(r["row_id"] for r in rows) == [f"fl_concurrent_{i}" for i in range(8)]
    for r in [row, *rows]:
        assert r["step_sources"] == [CONTROL_PLANE] * r["steps"], r["step_sources"]
    after = sessions_created_per_worker(front)
    assert all(after[w] > before.get(w, 0) for w in ("0", "1")), (before, after)


def test_openreward_client_sees_a_call_cut_by_its_workers_death_as_the_session_lost(openreward_python, tmp_path):
    # The front closes the call's stream unfinished; the client asks again with its task_id and is told 410.
    gate = tmp_path / "gate"  # never opened: the call runs until its worker is killed
    args = ("--env", "tests.scale.scale_envs:Gated", "--log-level", "warning")
    with deployment(tmp_path, *args, workers=1, env={"ORS_GATE_FILE": str(gate)}) as front:
        outcome: list[dict] = []
        caller = threading.Thread(
            target=lambda: outcome.append(
                run_script(openreward_python, "openreward_cut_call.py", front.url, home=tmp_path / "home")
            )
        )
        caller.start()
        deadline = time.monotonic() + 60
        while not Path(f"{gate}.waiting").exists():  # the worker's tool is another process: poll, bounded
            assert caller.is_alive() and time.monotonic() < deadline, outcome
            time.sleep(0.05)
        os.kill(front.worker_pids()[0], signal.SIGKILL)
        caller.join(timeout=120)
    assert outcome and outcome[0]["error"]["type"] == "SessionTerminatedError", outcome
    assert "410" in outcome[0]["error"]["message"]
