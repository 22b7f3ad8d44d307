"""`GET /episodes/stats` and `ors-server episodes stats`, on SQLite and on PostgreSQL: the figures of each group
against the same figures the test works out from the episodes `/episodes` lists."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.faces.mcp_helpers import Counter
from tests.records.helpers import until
from tests.serving import serve

# (session, run label, increments, finish, deleted): rewards 0.5 per increment, 1.0 for finish.
PLAYS = [
    ("st-a1", "A", 1, True, True),
    ("st-a2", "A", 3, False, True),
    ("st-a3", "A", 0, True, False),
    ("st-b1", "B", 2, False, True),
    ("st-b2", "B", 4, True, True),
    ("st-none", None, 1, False, True),
]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def records(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return str(tmp_path_factory.mktemp("stats") / "episodes.db")
    pytest.importorskip("psycopg", reason="the PostgreSQL records need psycopg")
    return str(request.getfixturevalue("postgres"))


@pytest.fixture(scope="module")
def server(records: str) -> Iterator[str]:
    with serve(create_app([Counter], Settings(records=records))) as url, httpx.Client(base_url=url) as client:
        for sid, run, increments, finish, deleted in PLAYS:
            headers = {"X-Session-ID": sid}
            labels = {"X-Episode-Labels": f"run={run}"} if run else {}
            body = {"env_name": "counter", "task_spec": {"start": increments}}
            assert client.post("/create", headers={**headers, **labels}, json=body).status_code == 200
            for _ in range(increments):
                client.post("/counter/call", headers=headers, json={"name": "increment", "input": {}})
            if finish:
                client.post("/counter/call", headers=headers, json={"name": "finish", "input": {}})
            if deleted:
                client.post("/delete", headers=headers)
        until(lambda: client.get("/episodes", params={"status": "ended"}).json()["episodes"], _all_ended, "ended")
        yield url


def _all_ended(listed: list[dict[str, Any]]) -> bool:
    return len([e for e in listed if e["id"].startswith("st-")]) == sum(1 for p in PLAYS if p[4])


def expected(episodes: list[dict[str, Any]], key: Any) -> dict[Any, dict[str, Any]]:
    """The figures of each group, worked out here from the listed episodes."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for episode in episodes:
        groups.setdefault(key(episode), []).append(episode)
    return {
        name: {
            "episodes": len(members),
            "finished": sum(e["finished"] for e in members),
            "live": sum(e["status"] == "live" for e in members),
            "mean_reward": pytest.approx(sum(e["reward"] for e in members) / len(members)),
            "mean_steps": pytest.approx(sum(e["steps"] for e in members) / len(members)),
            "min_reward": min(e["reward"] for e in members),
            "max_reward": max(e["reward"] for e in members),
        }
        for name, members in groups.items()
    }


def answered(client: httpx.Client, **params: str) -> dict[Any, dict[str, Any]]:
    response = client.get("/episodes/stats", params=params)
    assert response.status_code == 200, response.text
    fields = ("episodes", "finished", "live", "mean_reward", "mean_steps", "min_reward", "max_reward")
    return {g["key"]: {f: g[f] for f in fields} for g in response.json()["groups"]}


def test_stats_by_label_env_and_task_match_the_listed_episodes(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as client:
        listed = client.get("/episodes", params={"limit": 500}).json()["episodes"]
        assert len(listed) == len(PLAYS)
        assert answered(client, group_by="label.run") == expected(listed, lambda e: e["labels"].get("run"))
        assert answered(client, group_by="env") == expected(listed, lambda e: e["env"])
        assert answered(client) == expected(listed, lambda e: None)
        by_task = answered(client, group_by="task")
        assert by_task == expected(listed, lambda e: json.dumps({"start": _increments(e["id"])}))

        ended_a = [e for e in listed if e["labels"].get("run") == "A" and e["status"] == "ended"]
        filtered = answered(client, group_by="label.run", **{"label.run": "A", "status": "ended"})
        assert filtered == expected(ended_a, lambda e: "A")
        assert filtered["A"]["episodes"] == 2 and filtered["A"]["mean_reward"] == pytest.approx((1.5 + 1.5) / 2)


def _increments(session_id: str) -> int:
    return next(p[2] for p in PLAYS if p[0] == session_id)


def test_stats_over_time_add_up_to_their_group(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as client:
        groups = client.get("/episodes/stats", params={"group_by": "label.run", "bucket": "3600"}).json()["groups"]
    for group in groups:
        series = group["over_time"]
        assert series and sum(point["episodes"] for point in series) == group["episodes"]
        total = sum(point["mean_reward"] * point["episodes"] for point in series)
        assert total / group["episodes"] == pytest.approx(group["mean_reward"])
        assert all(point["start"] <= group["last_started_at"] for point in series)


def test_stats_refuse_what_they_cannot_group_by(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as client:
        wrong = client.get("/episodes/stats", params={"group_by": "colour"})
        bad_label = client.get("/episodes/stats", params={"group_by": "label.no spaces"})
        bad_bucket = client.get("/episodes/stats", params={"bucket": "0"})
    assert wrong.status_code == 400 and "group_by must be env, task or label.KEY" in wrong.json()["detail"]
    assert bad_label.status_code == 400 and "label name" in bad_label.json()["detail"]
    assert bad_bucket.status_code == 400 and "bucket must be" in bad_bucket.json()["detail"]


def test_the_cli_prints_the_same_stats_as_the_server(server: str, records: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as client:
        served = client.get("/episodes/stats", params={"group_by": "label.run", "status": "ended"}).json()
    printed = subprocess.run(
        [sys.executable, "-m", "ors_server.cli", "episodes", "stats", "--records", records]
        + ["--group-by", "label.run", "--status", "ended"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == served


def test_a_span_past_the_bound_of_buckets_is_refused(tmp_path: Path) -> None:
    from ors_server.records.db import Batch, Database

    database = Database(str(tmp_path / "span.db"))
    try:
        batch = Batch.empty()
        for n, started in enumerate((0.0, 10_000.0)):
            batch.episodes.append((f"k{n}", f"e{n}", "s", 0, "math", "ors", "{}", "{}", started, "o", 0, 0))
        database.write(batch)
        with pytest.raises(ValueError, match="more than 1000 buckets"):
            database.stats(None, bucket=1)
        series = database.stats(None, bucket=3600)[0]["over_time"]
        assert [point["bucket"] for point in series] == [0, 2]  # buckets without episodes are left out
    finally:
        database.close()


from tests.records.test_postgres import postgres  # noqa: E402, F401  (the PostgreSQL server fixture)
