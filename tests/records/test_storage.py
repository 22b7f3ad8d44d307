"""The records database: migrations of an older file, refusal of a newer one, retention, backpressure, and the
calls of a CodeAct step recorded one by one."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from ors_server.codeact import bwrap_problem
from ors_server.http.app import create_app
from ors_server.records import db as records_db
from ors_server.records.db import MIGRATIONS, SCHEMA_VERSION, Batch, Database, RecordsError
from ors_server.settings import Settings
from tests.faces.mcp_helpers import Counter
from tests.records.helpers import ended, until
from tests.serving import serve


def _old_file(path: Path, version: int) -> None:
    """A records file as a version of ors-server that knew `version` migrations left it."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE ors_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for step in MIGRATIONS[:version]:
            for statement in step:
                conn.execute(statement.replace("{float}", "REAL"))
        conn.execute("INSERT INTO ors_meta VALUES ('schema_version', ?)", (str(version),))


def test_an_older_file_is_migrated_and_keeps_its_episodes(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_file(path, 1)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO ors_episodes (key, id, session_id, number, env, face, labels, task, started_at, owner)"
            " VALUES ('k', 'old', 'old', 0, 'math', 'ors', '{}', '{}', 1.0, 'gone')"
        )
    database = Database(str(path))
    try:
        assert database.version() == SCHEMA_VERSION
        assert database.episode("old")["env"] == "math"
    finally:
        database.close()


def test_a_file_of_a_newer_version_is_refused_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    _old_file(path, SCHEMA_VERSION)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE ors_meta SET value = ?", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(RecordsError, match="written by a newer ors-server"):
        Database(str(path))


def _episode(key: str, started_at: float, size: int) -> Batch:
    batch = Batch.empty()
    batch.episodes.append((key, key, key, 0, "math", "ors", "{}", "{}", started_at, "o", size, 0))
    batch.ends.append((key, started_at + 1, "deleted"))
    return batch


def test_retention_forgets_old_episodes_and_the_oldest_past_the_size_bound(tmp_path: Path) -> None:
    database = Database(str(tmp_path / "kept.db"))
    now = time.time()
    try:
        for key, age_days, size in (("ancient", 10, 10), ("old", 3, 600), ("middle", 2, 600), ("new", 0, 600)):
            database.write(_episode(key, now - age_days * 86400, size))
        live = Batch.empty()
        live.episodes.append(("live", "live", "live", 0, "math", "ors", "{}", "{}", now - 20 * 86400, "o", 5000, 0))
        database.write(live)
        assert database.prune(keep_days=5, max_bytes=None) == 1
        assert database.prune(keep_days=None, max_bytes=6400) == 1  # live episodes are never forgotten
        kept = [row["id"] for row in database.episodes(limit=10).rows]
    finally:
        database.close()
    assert kept == ["new", "middle", "live"]


def test_a_full_queue_makes_calls_wait_and_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write = Database.write

    def slow_write(self: Database, batch: Batch) -> None:
        time.sleep(0.2)  # a database that falls behind: the writer's thread, never the event loop
        write(self, batch)

    monkeypatch.setattr(Database, "write", slow_write)
    app = create_app([Counter], Settings(records=str(tmp_path / "slow.db"), records_queue=1))
    with serve(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        client.post("/create", headers={"X-Session-ID": "pressed"}, json={"env_name": "counter", "task_spec": {}})
        for _ in range(5):
            client.post("/counter/call", headers={"X-Session-ID": "pressed"}, json={"name": "increment", "input": {}})
        client.post("/delete", headers={"X-Session-ID": "pressed"})
        record = ended(client, "pressed")
        metrics = client.get("/metrics").text
    assert len(record["calls"]) == 5 and record["steps"] == 5
    waited = next(line for line in metrics.splitlines() if line.startswith("ors_records_wait_seconds_total"))
    assert float(waited.split()[-1]) > 0
    assert "ors_records_dropped_total 0.0" in metrics


def test_resolve_names_the_default_file_in_the_working_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(records_db.ENV_VARIABLE, raising=False)
    assert records_db.resolve(None) == str(Path.cwd() / records_db.DEFAULT_FILE)
    assert records_db.resolve("OFF") is None
    assert records_db.resolve("postgresql://u:pw@h/db") == "postgresql://u:pw@h/db"
    assert records_db.shown("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"


def test_the_calls_of_a_codeact_step_are_recorded_before_the_step(tmp_path: Path) -> None:
    sandbox = "bwrap" if bwrap_problem() is None else "none"
    settings = Settings(records=str(tmp_path / "steps.db"), codeact=True, codeact_sandbox=sandbox, codeact_pool=0)
    with serve(create_app([Counter], settings)) as url, httpx.Client(base_url=url, timeout=60) as client:
        client.post("/create", headers={"X-Session-ID": "coder"}, json={"env_name": "counter", "task_spec": {}})
        code = "increment(by=2)\nfinish()"
        answer = client.post(
            "/counter/call", headers={"X-Session-ID": "coder"}, json={"name": "execute_code", "input": {"code": code}}
        )
        assert answer.status_code == 200
        record = until(
            lambda: client.get("/episodes/coder").json(), lambda e: len(e.get("calls", [])) == 3, "three calls"
        )
    inner, last, step = record["calls"]
    assert [inner["tool"], last["tool"], step["tool"]] == ["increment", "finish", "execute_code"]
    assert inner["step"] == last["step"] and "step" not in step
    assert inner["arguments"] == {"by": 2} and step["arguments"] == {"code": code}
    assert record["reward"] == 1.5 and record["finished"] is True


def test_reaped_and_failed_setup_episodes_end_saying_so(tmp_path: Path) -> None:
    from tests.ors_envs import FailingSetup

    app = create_app([Counter, FailingSetup], Settings(records=str(tmp_path / "ends.db"), session_timeout=0.5))
    with serve(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        client.post("/create", headers={"X-Session-ID": "idle"}, json={"env_name": "counter", "task_spec": {}})
        secret = {"TOKEN": "setup-secret-1"}
        body = {"env_name": FailingSetup.name, "task_spec": {}, "secrets": secret}
        assert client.post("/create", headers={"X-Session-ID": "broken"}, json=body).status_code == 200
        reaped = ended(client, "idle")
        failed = ended(client, "broken")
    assert reaped["end_reason"] == "reaped"
    assert failed["end_reason"] == "setup_failed" and failed["prompt"] is None
