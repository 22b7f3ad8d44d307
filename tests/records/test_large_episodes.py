"""A large episode is read a page of calls at a time (`GET /episodes/{id}` with `calls_cursor`, exports and `ors-server
episodes show` written page by page), and small reads stay fast while large ones run: one server, with a 24 MiB
episode in its records, for the module."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ors_server.http.app import create_app
from ors_server.records.db import Database
from ors_server.records.reading import FORMATS, PAGE_BYTES, episode_text, full
from ors_server.settings import Settings
from tests.records.helpers import Speaker, create, episode, say
from tests.serving import serve

MiB = 1024 * 1024
CALLS = 24


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A server whose records hold `big` (24 calls of 1 MiB each, live) and three small episodes."""
    records = tmp_path_factory.mktemp("large") / "episodes.db"
    with serve(create_app([Speaker], Settings(records=str(records)))) as url:
        with httpx.Client(base_url=url, timeout=120) as client:
            for n in range(3):
                create(client, f"small-{n}")
                say(client, f"small-{n}", "hi", 3)
            create(client, "big")
            for _ in range(CALLS):
                say(client, "big", "x", MiB)
            episode(client, "big", lambda e: e["steps"] == CALLS, timeout=60)
        yield url, records


def _all_calls(client: httpx.Client, episode_id: str) -> tuple[list[dict], list[int]]:
    """Every call of an episode, following `calls_next`; and the size of each answer."""
    calls, sizes, params = [], [], {}
    while True:
        response = client.get(f"/episodes/{episode_id}", params=params)
        assert response.status_code == 200, response.text[:200]
        sizes.append(len(response.content))
        page = response.json()
        calls += page["calls"]
        if page.get("calls_next") is None:
            return calls, sizes
        params = {"calls_cursor": page["calls_next"]}


def test_an_episode_is_read_a_page_of_calls_at_a_time(server: tuple[str, Path]) -> None:
    url, _ = server
    with httpx.Client(base_url=url, timeout=120) as client:
        calls, sizes = _all_calls(client, "big")
        # Before, one answer held the whole 24 MiB episode.
        assert max(sizes) <= PAGE_BYTES + 2 * MiB and len(sizes) >= CALLS * MiB // (PAGE_BYTES + MiB)
        assert len(calls) == CALLS and all(c["output"]["blocks"][0]["text"] == "x" * MiB for c in calls)
        header = client.get("/episodes/big", params={"calls_limit": 0}).json()
        assert header["calls"] == [] and header["calls_next"] == "-1" and header["steps"] == CALLS
        two = client.get("/episodes/big", params={"calls_limit": 2, "calls_cursor": "20"}).json()
        assert len(two["calls"]) == 2 and two["calls_next"] == "22"
        small = client.get("/episodes/small-0").json()
        assert len(small["calls"]) == 1 and small["calls_next"] is None
        for bad in ({"calls_cursor": "x"}, {"calls_limit": "1001"}, {"calls_limit": "-1"}):
            refused = client.get("/episodes/big", params=bad)
            assert refused.status_code == 400 and "calls_" in refused.json()["detail"]


def test_small_reads_stay_fast_while_large_episodes_are_read(server: tuple[str, Path]) -> None:
    url, _ = server
    big_done: list[float] = []

    def read_big(kind: str) -> None:
        with httpx.Client(base_url=url, timeout=300) as client:
            if kind == "episode":
                calls, _ = _all_calls(client, "big")
                assert len(calls) == CALLS
            else:
                with client.stream("GET", "/episodes/export") as response:
                    lines = sum(1 for _ in response.iter_lines())
                assert lines == 4
        big_done.append(time.monotonic())

    small: list[float] = []
    started = time.monotonic()
    readers = [threading.Thread(target=read_big, args=(kind,)) for kind in ["episode", "export"] * 4]
    for reader in readers:
        reader.start()
    with httpx.Client(base_url=url, timeout=300) as client:
        while any(reader.is_alive() for reader in readers):
            before = time.monotonic()
            response = client.get("/episodes", params={"limit": 5})
            small.append(time.monotonic() - before)
            assert response.status_code == 200 and len(response.json()["episodes"]) == 4
    for reader in readers:
        reader.join()
    assert len(big_done) == len(readers)
    big = max(big_done) - started
    # The figure to watch (printed with -s): before, one small read waited about as long as the large reads took.
    print(f"large reads {big:.2f} s; small reads meanwhile: {len(small)}, longest {max(small) * 1000:.0f} ms")
    assert len(small) >= 3 and max(small) < big / 4, (big, small)


def test_exports_and_the_cli_write_what_the_whole_episode_would_be(server: tuple[str, Path]) -> None:
    _, records = server
    database = Database(str(records))
    try:
        for listed in database.episodes(limit=10).rows:
            if listed["id"] == "big":
                continue
            row = database.state(listed["key"], full=True)
            assert row is not None
            whole = full(row, database.calls(row["key"]))
            for format in FORMATS:
                assert "".join(episode_text(database, row, format)) == json.dumps(FORMATS[format](whole)) + "\n"
            assert "".join(episode_text(database, row, "show")) == json.dumps(whole, indent=2) + "\n"
    finally:
        database.close()
    shown = subprocess.run(
        [sys.executable, "-m", "ors_server.cli", "episodes", "show", "big", "--records", str(records)],
        capture_output=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    record = json.loads(shown.stdout)
    assert len(record["calls"]) == CALLS and record["calls"][-1]["output"]["blocks"][0]["text"] == "x" * MiB
