"""Reading what a server recorded, with bounded waits (records reach the database within about a second)."""

from __future__ import annotations

import json
import secrets
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

from ors_server import Environment, TextBlock, ToolOutput, tool
from ors_server.records.db import Batch, Database
from tests.clients import client_venvs
from tests.clients.harness import client_env

WAIT = 10.0
RESULT_PREFIX = "ORS-RESULT "
"""What a script run by `eval_protocol_reads` prints before the JSON it reports."""


def until(read: Callable[[], Any], check: Callable[[Any], bool], what: str, timeout: float = WAIT) -> Any:
    """`read()` again until `check` holds of it, for at most `timeout` seconds; fails naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {timeout} s; last: {value!r}"[:3000])
        time.sleep(0.05)


def episode(client: httpx.Client, episode_id: str, check: Callable[[dict], bool] = lambda e: True, **kw: Any) -> dict:
    """The record of `episode_id` once `check` holds of it."""

    def read() -> dict | None:
        response = client.get(f"/episodes/{episode_id}")
        return response.json() if response.status_code == 200 else None

    return until(read, lambda e: e is not None and check(e), f"episode {episode_id}", **kw)


def ended(client: httpx.Client, episode_id: str, **kw: Any) -> dict:
    return episode(client, episode_id, lambda e: e["status"] == "ended", **kw)


class SayInput(BaseModel):
    text: str = "x"
    times: int = 1


class Speaker(Environment):
    """`say` answers `text` repeated `times` times (reward 0.1): outputs of any size, from a small request."""

    name = "speaker"

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="say something")]

    @tool
    def say(self, params: SayInput) -> ToolOutput:
        """Say `text`, `times` times."""
        return ToolOutput(blocks=[TextBlock(text=params.text * params.times)], reward=0.1)


def say(client: httpx.Client, sid: str, text: str, times: int) -> None:
    body = {"name": "say", "input": {"text": text, "times": times}}
    with client.stream("POST", "/speaker/call", headers={"X-Session-ID": sid}, json=body) as response:
        assert response.status_code == 200
        for _ in response.iter_bytes():
            pass  # the answer repeats the text: read and let go


def create(client: httpx.Client, sid: str) -> None:
    response = client.post("/create", headers={"X-Session-ID": sid}, json={"env_name": "speaker", "task_spec": {}})
    assert response.status_code == 200, response.text


def stored_bytes(path: str, where: str = "1 = 1") -> int:
    """The UTF-8 bytes of the text the records file holds (calls' arguments, outputs and errors; tasks, prompts)."""
    with sqlite3.connect(path) as db:
        calls = db.execute(
            "SELECT COALESCE(SUM(length(CAST(arguments AS BLOB)) + COALESCE(length(CAST(output AS BLOB)), 0)"
            f" + COALESCE(length(CAST(error AS BLOB)), 0)), 0) FROM ors_calls WHERE {where}"
        ).fetchone()[0]
        episodes = db.execute(
            "SELECT COALESCE(SUM(length(CAST(task AS BLOB)) + COALESCE(length(CAST(prompt AS BLOB)), 0)), 0)"
            f" FROM ors_episodes WHERE {where.replace('episode', 'key')}"
        ).fetchone()[0]
    return int(calls) + int(episodes)


def fill(database: Database, key: str, calls: int, size: int) -> None:
    """An ended episode of `calls` calls of `size` bytes each (random hex: it does not compress), written as the
    recorder writes them."""
    batch = Batch.empty()
    batch.episodes.append((key, key, key, 0, "speaker", "ors", "{}", "{}", 1.0, "o", calls * size, 0))
    for n in range(calls):
        text = json.dumps({"blocks": [{"type": "text", "text": secrets.token_hex(size // 2)}]})
        batch.calls.append((key, n, "ors", "say", "{}", 1, text, None, None, 1.0, 1.0, None, f"{key}-{n}", size, 0))
    batch.ends.append((key, 2.0, "deleted"))
    database.write(batch)


def eval_protocol_reads(script: str, text: str, tmp_path: Path) -> Any:
    """What `script`, Python run by the eval-protocol venv on a file holding `text` (its argv[1]), reported: the JSON
    after `RESULT_PREFIX` on a line of its output. Fails with its stderr when it reported nothing."""
    python = client_venvs.ensure_venv("eval-protocol")
    path = tmp_path / "eval-protocol-input"
    path.write_text(text)
    done = subprocess.run(
        [str(python), "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=client_env(tmp_path),
        cwd=tmp_path,
    )
    results = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert done.returncode == 0 and results, done.stderr[-4000:]
    return json.loads(results[0].removeprefix(RESULT_PREFIX))
