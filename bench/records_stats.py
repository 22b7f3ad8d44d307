"""How fast `GET /episodes/stats` answers on 100,000 episodes: the database's aggregation (`Database.stats`)
against the same figures worked out in Python from every episode read out of the database (what a dashboard
without it would do), in the same run, on SQLite (and PostgreSQL with `--postgres URL`).

    python bench/records_stats.py [-n 100000] [--rounds 5] [--postgres postgresql://...]

The episodes: 4 environments, 20 runs (label `run`), 50 tasks, started over a day; half with a second label.
Figures: the median of `--rounds` timings of each query, in ms, and the ratio Python / database.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ors_server.records.db import Batch, Database  # noqa: E402

CHUNK = 10_000


def fill(database: Database, n: int) -> None:
    """`n` ended episodes, written in batches as the recorder writes them."""
    rng = random.Random(7)
    start = time.time() - 86_400
    for first in range(0, n, CHUNK):
        batch = Batch.empty()
        for i in range(first, min(n, first + CHUNK)):
            key = f"k{i:07d}"
            labels = {"run": f"run-{i % 20}", **({"group": f"g{i % 7}"} if i % 2 else {})}
            task = json.dumps({"seed": i % 50})
            started = start + i * 86_400 / n
            batch.episodes.append(
                (key, key, key, 0, f"env-{i % 4}", "ors", json.dumps(labels), task, started, "o", 0, 0)
            )
            batch.labels += [(key, k, v) for k, v in labels.items()]
            steps = rng.randint(1, 30)
            batch.counters[key] = (steps, rng.random() * steps, rng.random() < 0.7, steps, 0, 0)
            batch.ends.append((key, started + 30, "deleted"))
        database.write(batch)


def in_python(database: Database, group_by: str) -> dict[Any, dict[str, float]]:
    """The figures by reading every episode (and its labels) and adding them up here."""
    rows = database.rows("SELECT key, env, task, labels, steps, reward, finished FROM ors_episodes")
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        key = json.loads(row["labels"]).get(group_by[6:]) if group_by.startswith("label.") else row[group_by]
        groups[key].append(row)
    return {
        key: {
            "episodes": len(members),
            "finished": sum(1 for m in members if m["finished"]),
            "mean_reward": sum(m["reward"] for m in members) / len(members),
            "mean_steps": sum(m["steps"] for m in members) / len(members),
        }
        for key, members in groups.items()
    }


def timed(work: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def run(target: str, n: int, rounds: int, label: str) -> None:
    database = Database(target)
    try:
        started = time.perf_counter()
        fill(database, n)
        print(f"{label}: {n} episodes written in {time.perf_counter() - started:.1f} s")
        for group_by in ("env", "task", "label.run"):
            ours = timed(lambda g=group_by: database.stats(g), rounds)
            python = timed(lambda g=group_by: in_python(database, g), rounds)
            check = {g["key"]: g["episodes"] for g in database.stats(group_by)}
            assert check == {k: v["episodes"] for k, v in in_python(database, group_by).items()}
            print(
                f"  group_by={group_by:10s} database {ours:8.1f} ms   python {python:8.1f} ms   {python / ours:5.1f}x"
            )
        filtered = timed(lambda: database.stats("label.run", labels={"group": "g3"}), rounds)
        print(f"  group_by=label.run, label.group=g3: database {filtered:8.1f} ms")
        series = timed(lambda: database.stats("label.run", bucket=3600), rounds)
        print(f"  group_by=label.run, bucket=3600 (24 buckets x 20 runs): database {series:8.1f} ms")
    finally:
        database.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", default=None, metavar="URL", help="also a PostgreSQL database (emptied first)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        run(str(Path(directory) / "stats.db"), args.n, args.rounds, "SQLite")
    if args.postgres:
        database = Database(args.postgres)
        for table in ("ors_calls", "ors_labels", "ors_episodes"):
            database.execute(f"DELETE FROM {table}")
        database.close()
        run(args.postgres, args.n, args.rounds, "PostgreSQL")


if __name__ == "__main__":
    main()
