"""Episode records in PostgreSQL: a real server, started by the fixture from Debian's `postgresql` binaries into
a temporary directory (a Unix socket there, a free port), as user `postgres` when the tests run as root."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ors_server.http.app import create_app
from ors_server.records.db import SCHEMA_VERSION, Database
from ors_server.settings import Settings
from tests.faces.mcp_helpers import Counter
from tests.records.helpers import ended, episode, fill
from tests.serving import free_port, serve

pytest.importorskip("psycopg", reason="the PostgreSQL records need psycopg: pip install 'ors-server[postgres]'")


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """The URL of a PostgreSQL server of our own, for this module."""
    bin_dir = _binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not found (Debian: apt-get install postgresql)")
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="ors-pg-"))
    if os.geteuid() == 0:
        # initdb refuses to run as root: the cluster is the `postgres` user's, in a directory it owns.
        if shutil.which("runuser") is None or subprocess.run(["id", "postgres"], capture_output=True).returncode:
            pytest.skip("running as root without a `postgres` user (or runuser) to own a cluster")
        shutil.chown(root, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", free_port()
    log = root / "server.log"
    try:
        subprocess.run(
            [*as_user, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        options = f"-k {root} -p {port} -c listen_addresses='' -c fsync=off"
        subprocess.run(
            [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "start"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield f"postgresql://postgres@/postgres?host={root}&port={port}"
    finally:
        if data.exists():
            subprocess.run(
                [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)


def test_two_servers_record_into_one_postgres_and_each_reads_both(postgres: str) -> None:
    first = create_app([Counter], Settings(records=postgres))
    second = create_app([Counter], Settings(records=postgres))
    with serve(first) as one, serve(second) as two:
        with httpx.Client(base_url=one, timeout=10) as a, httpx.Client(base_url=two, timeout=10) as b:
            for client, sid in ((a, "pg-a"), (b, "pg-b")):
                create = client.post(
                    "/create",
                    headers={"X-Session-ID": sid, "X-Episode-Labels": "run=pg"},
                    json={"env_name": "counter", "task_spec": {"start": 1}},
                )
                assert create.status_code == 200
                client.post("/counter/call", headers={"X-Session-ID": sid}, json={"name": "increment", "input": {}})
                client.post("/delete", headers={"X-Session-ID": sid})
            record = ended(a, "pg-b")
            ended(b, "pg-a")
            listed = b.get("/episodes", params={"label.run": "pg"}).json()["episodes"]
    assert [e["id"] for e in listed] == ["pg-b", "pg-a"]
    assert record["calls"][0]["output"]["blocks"] == [{"type": "text", "text": '{"count": 2}'}]
    assert record["reward"] == 0.5 and record["end_reason"] == "deleted"

    cli = subprocess.run(
        [sys.executable, "-m", "ors_server.cli", "episodes", "list", "--records", postgres, "--label", "run=pg"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert [line.split()[0] for line in cli.stdout.splitlines()] == ["pg-b", "pg-a"], cli.stderr


def test_a_stream_on_one_server_follows_an_episode_the_other_records(postgres: str) -> None:
    with serve(create_app([Counter], Settings(records=postgres))) as one:
        with serve(create_app([Counter], Settings(records=postgres))) as two, httpx.Client(base_url=one) as a:
            sid = {"X-Session-ID": "pg-live"}
            a.post("/create", headers=sid, json={"env_name": "counter", "task_spec": {"start": 1}})
            with httpx.Client(base_url=two, timeout=30) as b:
                episode(b, "pg-live")
                with b.stream("GET", "/episodes/pg-live/events") as events:
                    assert events.status_code == 200
                    a.post("/counter/call", headers=sid, json={"name": "increment", "input": {}})
                    a.post("/delete", headers=sid)
                    names = []
                    for line in events.iter_lines():
                        if line.startswith("event: "):
                            names.append(line.removeprefix("event: "))
                            if names[-1] == "end":
                                break
    assert names == ["call", "end"]


def test_postgres_schema_is_migrated_once(postgres: str) -> None:
    database = Database(postgres)
    try:
        assert database.version() == SCHEMA_VERSION
    finally:
        database.close()


def test_postgres_pages_calls_and_gives_the_space_of_forgotten_episodes_back(postgres: str) -> None:
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as admin:
        admin.execute("CREATE DATABASE reclaimed")
    database = Database(postgres.replace("/postgres?", "/reclaimed?"))
    try:
        fill(database, "pg-big", calls=20, size=200_000)
        page = database.call_page("pg-big", -1, 1000, 1_000_000)
        assert [row["n"] for row in page.rows] == [0, 1, 2, 3, 4] and page.more

        def table_bytes() -> int:
            return int(database.rows("SELECT pg_table_size('ors_calls') AS size")[0]["size"])

        assert table_bytes() > 3_000_000
        assert database.prune(keep_days=None, max_bytes=100_000) == 1
        database.reclaim()
        # Before, nothing gave the space back: the table kept its 4 MB.
        assert table_bytes() < 500_000, table_bytes()
    finally:
        database.close()
