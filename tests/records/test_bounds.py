"""What the records keep is bounded in bytes: `--records-max-bytes` counts UTF-8 bytes, holds for live episodes too
(what does not fit is cut to a marker the record shows), and the space of forgotten episodes goes back to the file
system; `--records-call-max-bytes` bounds each row."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import httpx
import pytest

from ors_server.http.app import create_app
from ors_server.records.db import MIGRATIONS, Database
from ors_server.settings import Settings
from tests.records.helpers import Speaker, create, ended, episode, fill, say, stored_bytes
from tests.serving import serve

MiB = 1024 * 1024
CLEF = "\U0001d11e"  # one character, four bytes in UTF-8


def _on_disk(path: Path) -> int:
    return sum(os.path.getsize(f"{path}{suffix}") for suffix in ("", "-wal") if os.path.exists(f"{path}{suffix}"))


def test_the_size_bound_counts_bytes_not_characters(tmp_path: Path) -> None:
    path = tmp_path / "bytes.db"
    settings = Settings(records=str(path), records_max_bytes=2 * MiB)
    with serve(create_app([Speaker], settings)) as url, httpx.Client(base_url=url, timeout=60) as client:
        for n in range(6):
            create(client, f"clef-{n}")
            say(client, f"clef-{n}", CLEF, 200_000)  # 800 kB as UTF-8, but 200 k characters
            client.post("/delete", headers={"X-Session-ID": f"clef-{n}"})
            last = ended(client, f"clef-{n}")
    # Before, 6 x 200 k characters passed for 1.2 MB under the 2 MiB bound and all 4.8 MB were kept.
    assert stored_bytes(str(path)) <= 2 * MiB
    assert last["truncated_bytes"] == 0 and last["calls"][0]["output"]["blocks"][0]["text"] == CLEF * 200_000
    with sqlite3.connect(path) as db:
        kept = [row[0] for row in db.execute("SELECT id FROM ors_episodes ORDER BY started_at")]
    assert kept[-1] == "clef-5" and "clef-0" not in kept


def test_a_live_episode_past_the_size_bound_keeps_markers_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    settings = Settings(records=str(path), records_max_bytes=2 * MiB)
    with serve(create_app([Speaker], settings)) as url, httpx.Client(base_url=url, timeout=60) as client:
        create(client, "talker")
        for _ in range(8):
            say(client, "talker", CLEF, 125_000)  # 500 kB each, 4 MB in all
        record = episode(client, "talker", lambda e: len(e["calls"]) == 8)
        assert record["status"] == "live"
    # Before, a live episode was never bounded: all 4 MB were kept under a 2 MiB bound.
    assert stored_bytes(str(path)) <= 2 * MiB
    assert record["truncated_bytes"] >= 8 * 500_000 - 2 * MiB
    first, last = record["calls"][0], record["calls"][-1]
    assert "truncated_bytes" not in first and first["output"]["blocks"][0]["text"] == CLEF * 125_000
    assert last["truncated_bytes"] > 0 and last["ok"] is True and last["output"]["reward"] == 0.1
    (marker,) = last["output"]["blocks"]
    assert marker["text"].endswith("(--records-max-bytes)]") and "record truncated: " in marker["text"]
    assert last["arguments"] == {"text": CLEF, "times": 125_000}  # small arguments are kept whole


def test_a_call_past_the_row_bound_keeps_the_start_of_its_text_and_a_marker(tmp_path: Path) -> None:
    path = tmp_path / "row.db"
    settings = Settings(records=str(path), records_call_max_bytes=64 * 1024)
    with serve(create_app([Speaker], settings)) as url, httpx.Client(base_url=url, timeout=60) as client:
        create(client, "long")
        say(client, "long", "ab" + CLEF, 100_000)  # 600 kB
        say(client, "long", "short", 1)
        record = episode(client, "long", lambda e: len(e["calls"]) == 2)
    cut, whole = record["calls"]
    text = cut["output"]["blocks"][0]["text"]
    assert text.startswith("ab" + CLEF + "ab") and text.endswith("(--records-call-max-bytes)]")
    assert len(json.dumps(cut["output"], ensure_ascii=False).encode()) <= 64 * 1024
    assert cut["truncated_bytes"] > 500_000 and record["truncated_bytes"] == cut["truncated_bytes"]
    assert whole["output"]["blocks"][0]["text"] == "short" and "truncated_bytes" not in whole


@pytest.mark.parametrize("made_by", ["this version", "a version without incremental vacuum"])
def test_the_space_of_forgotten_episodes_goes_back_to_the_file_system(tmp_path: Path, made_by: str) -> None:
    path = tmp_path / "shrinks.db"
    if made_by != "this version":
        with sqlite3.connect(path) as conn:  # as an older ors-server made it: no auto_vacuum, schema version 2
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("CREATE TABLE ors_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            for statement in MIGRATIONS[0] + MIGRATIONS[1]:
                conn.execute(statement.replace("{float}", "REAL"))
            conn.execute("INSERT INTO ors_meta VALUES ('schema_version', '2')")
    database = Database(str(path))
    try:
        for n in range(4):
            fill(database, f"e{n}", calls=20, size=100_000)
        assert _on_disk(path) > 6 * MiB
        assert database.prune(keep_days=None, max_bytes=MiB // 2) == 4
        database.reclaim()
        # Before, the file kept its 8 MB (and the WAL as much) after every row was forgotten.
        assert _on_disk(path) < MiB // 2, _on_disk(path)
        assert database.episodes(limit=5).rows == []
    finally:
        database.close()
