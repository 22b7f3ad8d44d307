"""Where episode records are kept: one SQLite file or one PostgreSQL database, through the drivers directly.

Everything here is synchronous and runs on a thread of its own (the recorder's writer thread, or a reader's): the
standard library's `sqlite3` for the embedded default, and `psycopg` (3) for PostgreSQL, imported only when a
`postgresql://` URL is given. One SQL text serves both: it is written with `?` placeholders and `{float}` for the
one column type that differs, and `Database` fills those in for its backend.

The schema is versioned (`ors_meta.schema_version`): `MIGRATIONS[n]` takes a database from version n to n + 1, and
opening a database applies the ones it lacks, under a lock, so several processes opening one database at once
migrate it once. A database written by a newer version is refused with a message that says so.

Several processes write to one database: SQLite in WAL mode with a busy timeout (writers take turns, readers never
wait), PostgreSQL as it is. Each writer process registers itself in `ors_writers` (an owner token, its host and
pid, a heartbeat); its episodes carry the token, so an episode whose process died can be told from a live one
(`mark_orphans`).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

DEFAULT_FILE = "ors-episodes.db"
"""The SQLite file records go to by default, in the working directory."""
ENV_VARIABLE = "ORS_RECORDS"
"""Where records go when `--records` is not given (the tests point it at a temporary file)."""
BUSY_TIMEOUT_MS = 10_000
WAL_LIMIT = 16 * 1024 * 1024
"""Bytes the SQLite WAL file is cut back to after a checkpoint that emptied it (`journal_size_limit`): a burst of
writes does not leave a large WAL behind."""
MARKS_PER_QUERY = 500
"""Episode keys per query of `Database.marks` (under SQLite's and PostgreSQL's limits on parameters)."""
STALE_WRITER = 60.0
"""Seconds without a heartbeat after which a writer on another host is taken for dead (its episodes
`worker_lost`); a writer on this host is known dead at once when its pid is gone."""

MIGRATIONS: list[list[str]] = [
    # 0 -> 1: episodes, their calls and labels, and the writers that own live episodes.
    [
        "CREATE TABLE ors_writers (owner TEXT PRIMARY KEY, host TEXT NOT NULL, pid BIGINT NOT NULL,"
        " started_at {float} NOT NULL, seen_at {float} NOT NULL)",
        "CREATE TABLE ors_episodes (key TEXT PRIMARY KEY, id TEXT NOT NULL, session_id TEXT NOT NULL,"
        " number BIGINT NOT NULL, env TEXT NOT NULL, face TEXT NOT NULL, labels TEXT NOT NULL, task TEXT NOT NULL,"
        " prompt TEXT, started_at {float} NOT NULL, ended_at {float}, end_reason TEXT,"
        " steps BIGINT NOT NULL DEFAULT 0, reward {float} NOT NULL DEFAULT 0, finished BIGINT NOT NULL DEFAULT 0,"
        " calls BIGINT NOT NULL DEFAULT 0, owner TEXT NOT NULL)",
        "CREATE INDEX ors_episodes_started ON ors_episodes (started_at, key)",
        "CREATE INDEX ors_episodes_id ON ors_episodes (id)",
        "CREATE INDEX ors_episodes_live ON ors_episodes (owner) WHERE ended_at IS NULL",
        "CREATE TABLE ors_calls (episode TEXT NOT NULL, n BIGINT NOT NULL, face TEXT, tool TEXT NOT NULL,"
        " arguments TEXT, ok BIGINT NOT NULL, output TEXT, error TEXT, reason TEXT, started_at {float} NOT NULL,"
        " duration_ms {float} NOT NULL, step TEXT, PRIMARY KEY (episode, n))",
        "CREATE TABLE ors_labels (episode TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
        " PRIMARY KEY (episode, key))",
        "CREATE INDEX ors_labels_kv ON ors_labels (key, value)",
    ],
    # 1 -> 2: the bytes each episode's record takes, for the size bound (`--records-max-bytes`).
    ["ALTER TABLE ors_episodes ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0"],
    # 2 -> 3: each call's own id, which the calls made from inside a CodeAct step name as their `step`.
    ["ALTER TABLE ors_calls ADD COLUMN id TEXT"],
    # 3 -> 4: the bytes of each call (read through the index alone, to page an episode's calls by size) and the
    # bytes the record left out of a call or an episode (past `--records-call-max-bytes` or `--records-max-bytes`).
    [
        "ALTER TABLE ors_calls ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE ors_calls ADD COLUMN truncated BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE ors_episodes ADD COLUMN truncated BIGINT NOT NULL DEFAULT 0",
        "CREATE INDEX ors_calls_sizes ON ors_calls (episode, n, bytes)",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)
_PG_LOCK = 0x0E5_4EC0  # the advisory lock that serialises migrations of one PostgreSQL database


class RecordsError(Exception):
    """The records database cannot be used (unreachable, written by a newer version, ...)."""


def is_postgres(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def resolve(target: str | None) -> str | None:
    """Where records go: `target` (`--records`), else `$ORS_RECORDS`, else `ors-episodes.db` in the working
    directory; a file path made absolute (so every process of a deployment names the same file); None for off."""
    chosen = target or os.environ.get(ENV_VARIABLE) or DEFAULT_FILE
    if chosen.strip().lower() == "off":
        return None
    return chosen if is_postgres(chosen) else os.path.abspath(chosen)


def shown(target: str) -> str:
    """`target` as a log line may show it: a PostgreSQL URL without its password."""
    if not is_postgres(target):
        return target
    scheme, _, rest = target.partition("://")
    if "@" in rest:
        credentials, _, place = rest.rpartition("@")
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}:***@{place}" if ":" in credentials else f"{scheme}://{user}@{place}"
    return target


@dataclass
class Page:
    rows: list[dict[str, Any]]
    next: str | None


EPISODE_COLUMNS = (
    "key, id, session_id, number, env, face, labels, started_at, ended_at, end_reason, steps, reward, finished, calls,"
    " truncated"
)
CALL_COLUMNS = "n, id, face, tool, arguments, ok, output, error, reason, started_at, duration_ms, step, truncated"


class Database:
    """One connection to the records database, used from one thread at a time (`lock`)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.postgres = is_postgres(target)
        self.lock = threading.Lock()
        try:
            self._conn = self._connect()
            self._migrate()
        except RecordsError:
            raise
        except Exception as exc:
            raise RecordsError(f"cannot open the episode records at {shown(target)}: {exc}") from None

    def _connect(self) -> Any:
        if self.postgres:
            import psycopg

            return psycopg.connect(self.target, autocommit=True)
        # Made 0600 before SQLite opens it (SQLite gives the WAL and shared-memory files the database's mode): the
        # records hold every episode's outputs, for this server's user alone.
        os.close(os.open(self.target, os.O_RDWR | os.O_CREAT, 0o600))
        conn = sqlite3.connect(
            self.target, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Pages freed by pruning are given back to the file system by `reclaim` (this takes effect on a new file
        # only; `reclaim` converts an older one once).
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT}")
        # WAL with synchronous NORMAL survives a process crash (SIGKILL) whole; only an OS crash may lose the last
        # transactions.
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def close(self) -> None:
        with self.lock:
            self._conn.close()

    def sql(self, text: str) -> str:
        return text.replace("?", "%s") if self.postgres else text

    def execute(self, text: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(self.sql(text), params)

    def rows(self, text: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.lock:
            cursor = self.execute(text, params)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction: SQLite's taken for writing at once (`BEGIN IMMEDIATE`), so two writers never deadlock
        upgrading a read lock."""
        self.execute("BEGIN" if self.postgres else "BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.execute("ROLLBACK")
            raise
        self.execute("COMMIT")

    # The schema.

    def _migrate(self) -> None:
        with self.lock, self.transaction():
            if self.postgres:
                self.execute("SELECT pg_advisory_xact_lock(?)", (_PG_LOCK,))
            self.execute("CREATE TABLE IF NOT EXISTS ors_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = self.execute("SELECT value FROM ors_meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise RecordsError(
                    f"the episode records at {shown(self.target)} are of schema version {version}, written by a newer "
                    f"ors-server (this one knows up to {SCHEMA_VERSION}): upgrade, or choose another --records"
                )
            for step in MIGRATIONS[version:]:
                for statement in step:
                    self.execute(statement.replace("{float}", "DOUBLE PRECISION" if self.postgres else "REAL"))
            if version < SCHEMA_VERSION:
                self.execute("DELETE FROM ors_meta WHERE key = 'schema_version'")
                self.execute("INSERT INTO ors_meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    def version(self) -> int:
        return int(self.rows("SELECT value FROM ors_meta WHERE key = 'schema_version'")[0]["value"])

    # Writers and orphans.

    def register(self, owner: str) -> None:
        now = time.time()
        with self.lock, self.transaction():
            self.execute(
                "INSERT INTO ors_writers (owner, host, pid, started_at, seen_at) VALUES (?, ?, ?, ?, ?)",
                (owner, socket.gethostname(), os.getpid(), now, now),
            )

    def heartbeat(self, owner: str) -> None:
        with self.lock:
            self.execute("UPDATE ors_writers SET seen_at = ? WHERE owner = ?", (time.time(), owner))

    def retire(self, owner: str) -> None:
        with self.lock:
            self.execute("DELETE FROM ors_writers WHERE owner = ?", (owner,))

    def mark_orphans(self, owner: str | None = None) -> int:
        """End, as `worker_lost`, the live episodes of writers that are gone: on this host, those whose pid is no
        longer running; elsewhere, those silent for `STALE_WRITER` seconds; and episodes whose writer row is
        missing altogether. Returns how many episodes it ended."""
        host, now = socket.gethostname(), time.time()
        writers = self.rows("SELECT owner, host, pid, seen_at FROM ors_writers")
        gone = [
            w["owner"]
            for w in writers
            if w["owner"] != owner
            and ((w["host"] == host and not _running(int(w["pid"]))) or w["seen_at"] < now - STALE_WRITER)
        ]
        known = {w["owner"] for w in writers} - set(gone)
        live_owners = {r["owner"] for r in self.rows("SELECT DISTINCT owner FROM ors_episodes WHERE ended_at IS NULL")}
        lost = [o for o in live_owners if o not in known and o != owner]
        ended = 0
        with self.lock, self.transaction():
            for dead in lost:
                cursor = self.execute(
                    "UPDATE ors_episodes SET ended_at = ?, end_reason = 'worker_lost'"
                    " WHERE owner = ? AND ended_at IS NULL",
                    (now, dead),
                )
                ended += max(cursor.rowcount, 0)
            for dead in gone:
                self.execute("DELETE FROM ors_writers WHERE owner = ?", (dead,))
        return ended

    # Writing a batch.

    def write(self, batch: Batch) -> None:
        """Write one batch in one transaction."""
        with self.lock, self.transaction():
            if batch.episodes:
                self._conn.cursor().executemany(
                    self.sql(
                        "INSERT INTO ors_episodes (key, id, session_id, number, env, face, labels, task, started_at,"
                        " owner, bytes, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    ),
                    batch.episodes,
                )
            if batch.labels:
                self._conn.cursor().executemany(
                    self.sql("INSERT INTO ors_labels (episode, key, value) VALUES (?, ?, ?)"), batch.labels
                )
            if batch.calls:
                self._conn.cursor().executemany(
                    self.sql(
                        "INSERT INTO ors_calls (episode, n, face, tool, arguments, ok, output, error, reason,"
                        " started_at, duration_ms, step, id, bytes, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                        " ?, ?, ?, ?)"
                    ),
                    batch.calls,
                )
            for key, (steps, reward, finished, calls, size, truncated) in batch.counters.items():
                self.execute(
                    "UPDATE ors_episodes SET steps = ?, reward = ?, finished = ?, calls = ?, bytes = bytes + ?,"
                    " truncated = truncated + ? WHERE key = ?",
                    (steps, reward, finished, calls, size, truncated, key),
                )
            for key, prompt, size, truncated in batch.prompts:
                self.execute(
                    "UPDATE ors_episodes SET prompt = ?, bytes = bytes + ?, truncated = truncated + ? WHERE key = ?",
                    (prompt, size, truncated, key),
                )
            for key, ended_at, reason in batch.ends:
                self.execute(
                    "UPDATE ors_episodes SET ended_at = ?, end_reason = ? WHERE key = ? AND ended_at IS NULL",
                    (ended_at, reason, key),
                )

    # Retention.

    def prune(self, keep_days: float | None, max_bytes: int | None) -> int:
        """Forget ended episodes older than `keep_days`, then the oldest ended ones while the records take more
        than `max_bytes`. Returns how many were forgotten."""
        doomed: list[str] = []
        if keep_days is not None:
            horizon = time.time() - keep_days * 86400
            doomed += [
                r["key"]
                for r in self.rows(
                    "SELECT key FROM ors_episodes WHERE ended_at IS NOT NULL AND started_at < ? LIMIT 10000",
                    (horizon,),
                )
            ]
        if max_bytes is not None:
            total = self.usage()[0]
            oldest: tuple[float, str] | None = None
            while total > max_bytes and len(doomed) < 10_000:
                where, params = ("", ()) if oldest is None else (" AND (started_at, key) > (?, ?)", oldest)
                rows = self.rows(
                    "SELECT key, bytes, started_at FROM ors_episodes WHERE ended_at IS NOT NULL"
                    f"{where} ORDER BY started_at, key LIMIT 100",
                    params,
                )
                for row in rows:
                    if total <= max_bytes:
                        break
                    doomed.append(row["key"])
                    total -= int(row["bytes"])
                if len(rows) < 100:
                    break
                oldest = (rows[-1]["started_at"], rows[-1]["key"])
        if not doomed:
            return 0
        with self.lock, self.transaction():
            for key in set(doomed):
                for table, column in (("ors_calls", "episode"), ("ors_labels", "episode"), ("ors_episodes", "key")):
                    self.execute(f"DELETE FROM {table} WHERE {column} = ?", (key,))
        return len(set(doomed))

    def usage(self) -> tuple[int, int]:
        """The bytes every episode's record takes (as `--records-max-bytes` counts them), and how many writer
        processes share the database."""
        total = self.rows("SELECT COALESCE(SUM(bytes), 0) AS total FROM ors_episodes")[0]["total"]
        writers = self.rows("SELECT COUNT(*) AS writers FROM ors_writers")[0]["writers"]
        return int(total), int(writers)

    def reclaim(self) -> None:
        """Give the space of forgotten records back to the file system: SQLite moves its free pages to the end of
        the file and cuts them off (`incremental_vacuum`), then empties the WAL into the file and truncates it;
        PostgreSQL's plain `VACUUM` makes the space reusable and cuts empty pages off the end of each table (its
        files shrink only there; `VACUUM FULL` would lock the tables, so it is left to the operator)."""
        with self.lock:
            if self.postgres:
                for table in ("ors_calls", "ors_labels", "ors_episodes"):
                    self.execute(f"VACUUM {table}")
                return
            if self.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
                # A file made before incremental vacuum was switched on: converted once, by a full VACUUM.
                self.execute("PRAGMA auto_vacuum = INCREMENTAL")
                self.execute("VACUUM")
            else:
                # Run to its end by sqlite3_exec: `execute` steps a statement once, and each step frees one page.
                self._conn.executescript("PRAGMA incremental_vacuum;")
            self.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    # Reading.

    def episodes(
        self,
        *,
        env: str | None = None,
        status: str | None = None,
        labels: dict[str, str] | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 50,
        cursor: tuple[float, str] | None = None,
        full: bool = False,
    ) -> Page:
        """Episodes, newest first, that pass the filters; `cursor` is where the previous page stopped."""
        where, params = _where(env, status, labels, since, until)
        if cursor is not None:
            where.append("(started_at < ? OR (started_at = ? AND key < ?))")
            params += [cursor[0], cursor[0], cursor[1]]
        columns = EPISODE_COLUMNS + (", task, prompt" if full else ", task")
        rows = self.rows(
            f"SELECT {columns} FROM ors_episodes WHERE {' AND '.join(where)}"
            " ORDER BY started_at DESC, key DESC LIMIT ?",
            (*params, limit + 1),
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(rows, f"{rows[-1]['started_at']!r}/{rows[-1]['key']}" if more and rows else None)

    def stats(
        self,
        group_by: str | None = None,
        *,
        env: str | None = None,
        status: str | None = None,
        labels: dict[str, str] | None = None,
        since: float | None = None,
        until: float | None = None,
        bucket: float | None = None,
        max_buckets: int = 1000,
    ) -> list[dict[str, Any]]:
        """Figures of the episodes that pass the filters, by group, computed by the database: `group_by` is
        "env", "task", "label.KEY" (episodes without that label make the group None) or None (one group of all).
        With `bucket` (seconds), each group's figures also per bucket of start time (`over_time`), oldest first."""
        where, params = _where(env, status, labels, since, until)
        source, key = "ors_episodes", "NULL"
        if group_by in ("env", "task"):
            key = group_by
        elif group_by is not None and group_by.startswith("label."):
            source = "ors_episodes LEFT JOIN ors_labels g ON g.episode = ors_episodes.key AND g.key = ?"
            key = "g.value"
            params = [group_by.removeprefix("label."), *params]
        elif group_by is not None:
            raise ValueError(f"group_by must be env, task or label.KEY, got {group_by!r}"[:200])
        figures = (
            "COUNT(*) AS episodes, COUNT(CASE WHEN finished <> 0 THEN 1 END) AS finished,"
            " COUNT(CASE WHEN ended_at IS NULL THEN 1 END) AS live,"
            " AVG(CAST(reward AS {float})) AS mean_reward, MIN(reward) AS min_reward, MAX(reward) AS max_reward,"
            " AVG(CAST(steps AS {float})) AS mean_steps,"
            " MIN(started_at) AS first_started, MAX(started_at) AS last_started"
        )
        filtered = f"FROM {source} WHERE {' AND '.join(where)}"
        if bucket is None:
            grouped = " GROUP BY 1" if key != "NULL" else ""
            groups = self.rows(self._typed(f"SELECT {key} AS key, {figures} {filtered}{grouped}"), params)
            groups = [{**g, "over_time": []} for g in groups if g["episodes"]]  # no GROUP BY: a row even for none
        else:
            # The span first (the start-time index answers it): a bucket too small for it is refused unread.
            first, last = self.rows(f"SELECT MIN(started_at) AS first, MAX(started_at) AS last {filtered}", params)[
                0
            ].values()
            if first is not None and (last - first) / bucket > max_buckets:
                raise ValueError(
                    f"bucket: {bucket:g} s makes more than {max_buckets} buckets of the {last - first:.0f} s these "
                    "episodes span; ask for a longer one"
                )
            # One query, by group and bucket; each group's figures are its buckets' (one scan, not two).
            start = "FLOOR(started_at / ?)" if self.postgres else "CAST(started_at / ? AS INTEGER)"
            rows = self.rows(
                self._typed(f"SELECT {key} AS key, {start} AS bucket, {figures} {filtered} GROUP BY 1, 2 ORDER BY 2"),
                [bucket, *params],
            )
            series: dict[Any, list[dict[str, Any]]] = {}
            for row in rows:
                series.setdefault(row.pop("key"), []).append(row)
            groups = [{"key": name, **_combined(points), "over_time": points} for name, points in series.items()]
        groups.sort(key=lambda g: (g["key"] is None, g["key"] or ""))
        return groups

    def _typed(self, text: str) -> str:
        return text.replace("{float}", "DOUBLE PRECISION" if self.postgres else "REAL")

    def episode(self, episode_id: str) -> dict[str, Any] | None:
        """The latest episode recorded under `episode_id` (an id opened again after its session ended names a new
        episode), with its task and prompt."""
        rows = self.rows(
            f"SELECT {EPISODE_COLUMNS}, task, prompt FROM ors_episodes WHERE id = ? ORDER BY started_at DESC LIMIT 1",
            (episode_id,),
        )
        return rows[0] if rows else None

    def state(self, key: str, full: bool = False) -> dict[str, Any] | None:
        """The episode recorded as `key` (with its task and prompt if `full`)."""
        columns = EPISODE_COLUMNS + (", task, prompt" if full else "")
        rows = self.rows(f"SELECT {columns} FROM ors_episodes WHERE key = ?", (key,))
        return rows[0] if rows else None

    def marks(self, keys: Sequence[str]) -> dict[str, tuple[int, float | None]]:
        """Each of the episodes `keys` that is still recorded: its calls so far and when it ended (None if live),
        which change whenever something is recorded of it."""
        marks = {}
        for start in range(0, len(keys), MARKS_PER_QUERY):
            chunk = keys[start : start + MARKS_PER_QUERY]
            places = ", ".join("?" * len(chunk))
            for row in self.rows(f"SELECT key, calls, ended_at FROM ors_episodes WHERE key IN ({places})", chunk):
                marks[row["key"]] = (row["calls"], row["ended_at"])
        return marks

    def calls(self, key: str, after: int = -1) -> list[dict[str, Any]]:
        """Every call of an episode after call `after` (for small episodes and tests: readers page them)."""
        return self.rows(f"SELECT {CALL_COLUMNS} FROM ors_calls WHERE episode = ? AND n > ? ORDER BY n", (key, after))

    def call_page(self, key: str, after: int, limit: int, max_bytes: int) -> CallPage:
        """The calls of an episode after call `after`: at most `limit`, and no more than `max_bytes` of them (as
        recorded) unless the first alone is larger. Their sizes are read from an index first, so a page never
        loads what it will not return."""
        sizes = self.rows(
            "SELECT n, bytes FROM ors_calls WHERE episode = ? AND n > ? ORDER BY n LIMIT ?", (key, after, limit + 1)
        )
        total, last = 0, None
        for row in sizes[:limit]:
            if last is not None and total + int(row["bytes"]) > max_bytes:
                break
            total += int(row["bytes"])
            last = int(row["n"])
        if last is None:
            return CallPage([], False)
        rows = self.rows(
            f"SELECT {CALL_COLUMNS} FROM ors_calls WHERE episode = ? AND n > ? AND n <= ? ORDER BY n",
            (key, after, last),
        )
        return CallPage(rows, int(sizes[-1]["n"]) > last)


@dataclass
class CallPage:
    rows: list[dict[str, Any]]
    more: bool
    """Whether calls follow the last of `rows` (recorded so far)."""


def _combined(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of a group from those of its buckets."""
    episodes = sum(int(p["episodes"]) for p in points)
    return {
        "episodes": episodes,
        "finished": sum(int(p["finished"]) for p in points),
        "live": sum(int(p["live"]) for p in points),
        "mean_reward": sum(float(p["mean_reward"]) * int(p["episodes"]) for p in points) / episodes,
        "min_reward": min(p["min_reward"] for p in points),
        "max_reward": max(p["max_reward"] for p in points),
        "mean_steps": sum(float(p["mean_steps"]) * int(p["episodes"]) for p in points) / episodes,
        "first_started": min(p["first_started"] for p in points),
        "last_started": max(p["last_started"] for p in points),
    }


def _where(
    env: str | None, status: str | None, labels: dict[str, str] | None, since: float | None, until: float | None
) -> tuple[list[str], list[Any]]:
    """The SQL conditions (and their parameters) of the filters every reader of episodes shares."""
    where: list[str] = ["1 = 1"]
    params: list[Any] = []
    if env is not None:
        where.append("env = ?")
        params.append(env)
    if status == "live":
        where.append("ended_at IS NULL")
    elif status == "ended":
        where.append("ended_at IS NOT NULL")
    for key, value in (labels or {}).items():
        where.append("ors_episodes.key IN (SELECT episode FROM ors_labels WHERE key = ? AND value = ?)")
        params += [key, value]
    if since is not None:
        where.append("started_at >= ?")
        params.append(since)
    if until is not None:
        where.append("started_at < ?")
        params.append(until)
    return where, params


@dataclass
class Batch:
    """Rows to write in one transaction (built by the recorder's writer from its queue)."""

    episodes: list[tuple[Any, ...]]
    labels: list[tuple[str, str, str]]
    calls: list[tuple[Any, ...]]
    counters: dict[str, tuple[int, float, int, int, int, int]]
    """Each episode's steps, reward, finished, calls, and the bytes its calls in this batch took and left out."""
    prompts: list[tuple[str, str, int, int]]
    ends: list[tuple[str, float, str]]

    @classmethod
    def empty(cls) -> Batch:
        return cls([], [], [], {}, [], [])

    def __len__(self) -> int:
        return len(self.episodes) + len(self.calls) + len(self.prompts) + len(self.ends)


def parse_cursor(text: str) -> tuple[float, str]:
    """A cursor from `Page.next`; ValueError if it is not one."""
    started, _, key = text.partition("/")
    if not key:
        raise ValueError("not a cursor")
    return float(started), key


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)
