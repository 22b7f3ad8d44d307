"""The CLI readers (`ors-server episodes ...`, no server) and the `evaluation_row` export, validated by Eval
Protocol's own `EvaluationRow` model in its own venv."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ors_server.http.app import create_app
from ors_server.settings import Settings
from tests.faces.mcp_helpers import Counter
from tests.records.helpers import ended, eval_protocol_reads
from tests.serving import serve

VALIDATE = """
import json, sys
from eval_protocol.models import EvaluationRow
rows = [EvaluationRow.model_validate(json.loads(line)) for line in open(sys.argv[1]) if line.strip()]
print("ORS-RESULT " + json.dumps([
    {"score": r.evaluation_result.score, "roles": [m.role for m in r.messages],
     "tools": [c.function.name for m in r.messages for c in (m.tool_calls or [])],
     "row_id": r.input_metadata.row_id, "labels": r.input_metadata.session_data["labels"]}
    for r in rows
]))
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A records file holding two ended episodes (one with an image) and one live one; and the server's URL."""
    records = tmp_path_factory.mktemp("cli") / "episodes.db"
    with serve(create_app([Counter], Settings(records=str(records)))) as url, httpx.Client(base_url=url) as client:
        for sid, tools in (("cli-1", ["increment", "finish"]), ("cli-2", ["picture", "explode"])):
            create = client.post(
                "/create",
                headers={"X-Session-ID": sid, "X-Episode-Labels": f"run=cli,name={sid}"},
                json={"env_name": "counter", "task_spec": {"start": 0}},
            )
            assert create.status_code == 200
            for tool in tools:
                client.post("/counter/call", headers={"X-Session-ID": sid}, json={"name": tool, "input": {}})
            client.post("/delete", headers={"X-Session-ID": sid})
            ended(client, sid)
        client.post("/create", headers={"X-Session-ID": "cli-live"}, json={"env_name": "counter", "task_spec": {}})
        yield records, url


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ors_server.cli", "episodes", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_lists_shows_and_exports_without_a_server(recorded: tuple[Path, str]) -> None:
    records, _ = recorded
    listed = cli("list", "--records", str(records), "--label", "run=cli")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["cli-2", "cli-1"]
    assert "ended (deleted)" in lines[1] and "reward=1.5" in lines[1] and "name=cli-1" in lines[1]
    live = cli("list", "--records", str(records), "--status", "live")
    assert [line.split()[0] for line in live.stdout.splitlines()] == ["cli-live"]

    shown = cli("show", "cli-1", "--records", str(records))
    record = json.loads(shown.stdout)
    assert [c["tool"] for c in record["calls"]] == ["increment", "finish"] and record["steps"] == 2

    exported = cli("export", "--records", str(records), "--label", "run=cli", "--format", "jsonl")
    assert [json.loads(line)["id"] for line in exported.stdout.splitlines()] == ["cli-2", "cli-1"]


def test_cli_readers_say_what_is_wrong(tmp_path: Path, recorded: tuple[Path, str]) -> None:
    missing = cli("list", "--records", str(tmp_path / "none.db"))
    assert missing.returncode != 0 and "no episode records at" in missing.stderr
    assert not (tmp_path / "none.db").exists()
    unknown = cli("show", "nobody", "--records", str(recorded[0]))
    assert unknown.returncode != 0 and "no episode 'nobody'" in unknown.stderr
    bad_time = cli("list", "--records", str(recorded[0]), "--since", "soon")
    assert bad_time.returncode != 0 and "ISO 8601" in bad_time.stderr


@pytest.mark.clients
def test_evaluation_rows_validate_as_eval_protocols_model(tmp_path: Path, recorded: tuple[Path, str]) -> None:
    _, url = recorded
    rows = httpx.get(url + "/episodes/export", params={"format": "evaluation_row", "label.run": "cli"}).text
    assert len(rows.splitlines()) == 2
    validated = eval_protocol_reads(VALIDATE, rows, tmp_path)
    assert validated == [
        {
            "score": 0.0,
            "roles": ["user", "assistant", "tool", "assistant", "tool"],
            "tools": ["picture", "explode"],
            "row_id": "cli-2",
            "labels": {"run": "cli", "name": "cli-2"},
        },
        {
            "score": 1.5,
            "roles": ["user", "assistant", "tool", "assistant", "tool"],
            "tools": ["increment", "finish"],
            "row_id": "cli-1",
            "labels": {"run": "cli", "name": "cli-1"},
        },
    ]


def test_a_reader_that_stops_early_ends_the_cli_quietly(tmp_path: Path) -> None:
    """`ors-server episodes list | head -1`: the pipe breaks, and the CLI stops without a traceback."""
    from ors_server.records.db import Batch, Database

    path = tmp_path / "many.db"
    database = Database(str(path))
    batch = Batch.empty()
    for n in range(3000):  # far more than a pipe's buffer of output
        batch.episodes.append((f"k{n}", f"episode-{n:05d}", "s", 0, "math", "ors", "{}", "{}", float(n), "o", 0, 0))
    database.write(batch)
    database.close()
    process = subprocess.Popen(
        [sys.executable, "-m", "ors_server.cli", "episodes", "list", "--records", str(path), "--limit", "3000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # as `head -1` does once it has its line
    errors = process.stderr.read().decode()
    process.stderr.close()
    process.wait(timeout=60)
    assert first.startswith(b"episode-02999")
    assert "Traceback" not in errors and "BrokenPipeError" not in errors, errors
