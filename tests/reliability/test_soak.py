"""A short soak (`bench/soak.py`): concurrent ORS and MCP+control episodes with clients vanishing mid-call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


def test_a_short_soak_has_no_errors_and_leaks_no_sessions(tmp_path):
    report_path = tmp_path / "soak.json"
    command = [sys.executable, str(SOAK), "--duration", "10", "--sessions", "20", "--disconnect", "0.2"]
    command += ["--json", str(report_path), "--server-log", str(tmp_path / "server.log")]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert report_path.exists(), finished.stdout + finished.stderr
    report = json.loads(report_path.read_text())
    assert report["errors"] == 0, report["error_examples"]
    assert report["leaked_sessions"] == 0, report
    assert report["episodes"].get("ors", 0) > 0 and report["episodes"].get("mcp", 0) > 0, report
    assert report["disconnects"] > 0, report
    assert report["server"]["end"]["fds"] <= report["server"]["start"]["fds"] + 5, report["server"]
    assert finished.returncode == 0, finished.stdout + finished.stderr
