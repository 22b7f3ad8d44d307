"""Records outlive their server: a call answered is on disk within a second, a SIGTERM ends live episodes as
`shutdown`, and after a SIGKILL (of a server, or of a worker behind a front) the dead process's live episodes are
ended `worker_lost` rather than left live forever."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import time
from pathlib import Path

import httpx

from tests.clients.harness import run_server
from tests.records.helpers import until
from tests.scale.deployment import deployment

ON_DISK_WITHIN = 1.0
"""Seconds from a call's answer to its record being on disk (the records' promise)."""


def create(client: httpx.Client, sid: str, labels: str = "run=durable") -> None:
    response = client.post(
        "/create",
        headers={"X-Session-ID": sid, "X-Episode-Labels": labels},
        json={"env_name": "math", "split": "train", "index": 0},
    )
    assert response.status_code == 200, response.text


def submit(client: httpx.Client, sid: str) -> None:
    response = client.post("/math/call", headers={"X-Session-ID": sid}, json={"name": "submit", "input": {"answer": 1}})
    assert response.status_code == 200 and '"ok":true' in response.text.replace(" ", ""), response.text


def calls_on_disk(records: Path, sid: str) -> int:
    with sqlite3.connect(records, timeout=10) as db:
        row = db.execute(
            "SELECT COUNT(*) FROM ors_calls JOIN ors_episodes ON ors_calls.episode = ors_episodes.key"
            " WHERE ors_episodes.id = ?",
            (sid,),
        ).fetchone()
    return int(row[0])


def record(client: httpx.Client, sid: str) -> dict:
    response = client.get(f"/episodes/{sid}")
    return response.json() if response.status_code == 200 else {}


def test_a_call_is_on_disk_within_a_second_sigkill_leaves_worker_lost_and_sigterm_shutdown(tmp_path: Path) -> None:
    records = tmp_path / "episodes.db"
    with run_server(tmp_path / "first", "--env", "math", "--records", str(records)) as server:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            create(client, "killed")
            submit(client, "killed")
            answered = time.monotonic()
            until(lambda: calls_on_disk(records, "killed"), lambda n: n == 1, "the call on disk")
            took = time.monotonic() - answered
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(timeout=30)
    assert took <= ON_DISK_WITHIN, f"the call reached the disk {took:.2f} s after its answer"

    with run_server(tmp_path / "second", "--env", "math", "--records", str(records)) as server:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            lost = record(client, "killed")
            create(client, "stopped")
            submit(client, "stopped")
    assert lost["status"] == "ended" and lost["end_reason"] == "worker_lost"
    assert [c["tool"] for c in lost["calls"]] == ["submit"] and lost["labels"] == {"run": "durable"}
    # The second server ended with SIGTERM (run_server's end): it wrote the endings before it exited.
    with sqlite3.connect(records) as db:
        stopped = db.execute("SELECT end_reason, calls FROM ors_episodes WHERE id = 'stopped'").fetchone()
    assert stopped == ("shutdown", 1)


def test_workers_record_to_one_file_the_front_reads_it_and_a_lost_workers_episodes_end(tmp_path: Path) -> None:
    records = tmp_path / "episodes.db"
    with deployment(tmp_path, "--env", "math", "--records", str(records), workers=2) as running:
        with httpx.Client(base_url=running.url, timeout=30) as client:
            sids = [f"w-{n}" for n in range(4)]
            for sid in sids:
                create(client, sid, "run=workers")
                submit(client, sid)
            listed = until(
                lambda: client.get("/episodes", params={"label.run": "workers"}).json()["episodes"],
                lambda episodes: len(episodes) == 4 and all(e["steps"] == 1 for e in episodes),
                "four episodes through the front",
            )
            assert {e["id"] for e in listed} == set(sids)
            holders = {sid: running.holder(sid) for sid in sids}
            assert set(holders.values()) == {0, 1}, holders  # both workers recorded
            victim = running.worker_pids()[0]
            os.kill(victim, signal.SIGKILL)
            gone = [sid for sid, holder in holders.items() if holder == 0]
            ended = until(
                lambda: {sid: record(client, sid) for sid in sids},
                lambda found: all(found[sid].get("end_reason") == "worker_lost" for sid in gone),
                "the lost worker's episodes ended",
                timeout=60,
            )
            assert all(ended[sid]["status"] == "live" for sid in sids if sid not in gone)
            # The events of an ended episode replay through the front too: its call, then its end.
            replay = client.get(f"/episodes/{gone[0]}/events").text
            assert replay.count("event: call") == 1 and "worker_lost" in replay.split("event: end", 1)[1]


def test_behind_two_fronts_each_episode_is_recorded_once_and_every_front_lists_them_all(tmp_path: Path) -> None:
    records = tmp_path / "episodes.db"
    close = {"Connection": "close"}  # every request on a connection of its own: the kernel picks its front
    with deployment(tmp_path, "--env", "math", "--records", str(records), workers=2, fronts=2) as running:
        with httpx.Client(base_url=running.url, timeout=30, headers=close) as client:
            sids = [f"f-{n}" for n in range(6)]
            for sid in sids:
                create(client, sid, "run=fronts")
                submit(client, sid)
            seen_fronts = set()
            for _ in range(30):
                listed = client.get("/episodes", params={"label.run": "fronts"}).json()["episodes"]
                if len(listed) == 6 and all(e["steps"] == 1 for e in listed):
                    assert sorted(e["id"] for e in listed) == sids
                    metrics = client.get("/metrics").text
                    seen_fronts.add(re.search(r'ors_front_info\{front="(\d+)"', metrics)[1])  # type: ignore[index]
                else:
                    time.sleep(0.1)  # not all written yet (within a second): another process, no event to wait on
            assert seen_fronts == {"0", "1"}
    with sqlite3.connect(records) as db:
        rows = db.execute("SELECT id, calls FROM ors_episodes WHERE id LIKE 'f-%' ORDER BY id").fetchall()
    assert rows == [(sid, 1) for sid in sids]
