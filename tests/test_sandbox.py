"""The shared sandbox builder's host-side helpers (`ors_server.sandboxes.bubblewrap`); the sandboxes themselves are
tested through CodeAct (`tests/codeact/`) and the shell environment (`tests/environments/`)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from ors_server.http.app import create_app
from ors_server.sandboxes.bubblewrap import ENFORCEMENT, remove_tree, sweep_orphans
from tests.faces.mcp_helpers import Counter


def test_removing_a_directory_already_gone_leaves_its_parent_alone(tmp_path: Path) -> None:
    # Two servers sweeping the same orphan at once: the second finds it gone. Its parent is the shared /tmp, whose
    # mode once became 0700 that way.
    tmp_path.chmod(0o1777)
    remove_tree(tmp_path / "ors-shell-1.2-gone")
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o1777


def test_a_sweep_removes_directories_of_gone_servers_only(tmp_path: Path) -> None:
    with open("/proc/self/stat", "rb") as file:
        started = file.read().rsplit(b")", 1)[1].split()[19].decode()
    live = tmp_path / f"ors-shell-{os.getpid()}.{started}-abc"
    recycled = tmp_path / f"ors-codeact-{os.getpid()}.{int(started) + 1}-abc"  # the pid of a later process
    other = tmp_path / "ors-shell-notours"
    for path in (live, recycled, other):
        (path / "work").mkdir(parents=True)
    assert sweep_orphans(str(tmp_path)) == 1
    assert live.exists() and other.exists() and not recycled.exists()


def test_a_starting_server_says_what_enforces_the_sandboxes_limits(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="ors_server.sandbox"):
        with TestClient(create_app([Counter])) as client:
            assert client.get("/health").status_code == 200
    assert any(r.getMessage() == f"agent sandboxes: limits enforced by {ENFORCEMENT}" for r in caplog.records)
