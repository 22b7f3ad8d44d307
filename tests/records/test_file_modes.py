"""The records database is its server's user's alone (issue 31 item 1): it was created 0644 in the working
directory, and code of a hosted environment (uid 65534) copied it, with other sessions' outputs. The file, its WAL
and its shared-memory file are now 0600, whatever the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ors_server.records.db import Batch, Database


def test_the_database_its_wal_and_shm_are_created_readable_by_their_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "ors-episodes.db"
    old = os.umask(0o022)  # the usual umask, under which SQLite made the file 0644
    try:
        database = Database(str(path))
        try:
            batch = Batch.empty()
            batch.episodes.append(("k", "k", "k", 0, "math", "ors", "{}", "{}", 1.0, "o", 10, 0))
            database.write(batch)
            files = sorted(tmp_path.iterdir())
            assert [f.name for f in files] == [path.name, f"{path.name}-shm", f"{path.name}-wal"]
            for file in files:
                assert stat.S_IMODE(file.stat().st_mode) == 0o600, f"{file.name}: {oct(file.stat().st_mode)}"
        finally:
            database.close()
    finally:
        os.umask(old)
