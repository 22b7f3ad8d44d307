"""`/episodes/{id}/events` streams at scale: bounded by `--records-streams`, and streams on quiet live episodes
cost one query per look for all of them, not queries of their own."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from ors_server.http.app import create_app
from ors_server.records.db import Database
from ors_server.records.reading import POLL
from ors_server.settings import Settings
from tests.faces.mcp_helpers import Counter
from tests.records.helpers import episode
from tests.serving import serve

pytestmark = pytest.mark.anyio


def create(client: httpx.Client, sid: str) -> None:
    body = {"env_name": "counter", "task_spec": {"start": 0}}
    assert client.post("/create", headers={"X-Session-ID": sid}, json=body).status_code == 200
    episode(client, sid)  # recorded: its stream can open


async def test_streams_past_the_limit_are_refused_503_until_one_closes(tmp_path: Path) -> None:
    settings = Settings(records=str(tmp_path / "episodes.db"), records_streams=2)
    with serve(create_app([Counter], settings)) as base, httpx.Client(base_url=base, timeout=10) as client:
        for sid in ("a", "b", "c"):
            create(client, sid)
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            async with http.stream("GET", "/episodes/a/events") as first:
                async with http.stream("GET", "/episodes/b/events") as second:
                    assert (first.status_code, second.status_code) == (200, 200)
                    refused = await http.get("/episodes/c/events")
                    assert refused.status_code == 503 and refused.headers["retry-after"] == "2"
                    assert refused.json() == {"detail": "server is at its limit of 2 open episode event streams"}
            # Both closed: the server sees them go, and new streams are taken again.
            with anyio.fail_after(10):
                while True:
                    async with http.stream("GET", "/episodes/c/events") as third:
                        if third.status_code == 200:
                            break
                    await anyio.sleep(0.05)


async def test_streams_on_quiet_episodes_share_one_look_and_a_change_reaches_its_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries: collections.Counter[str] = collections.Counter()
    for name in ("state", "call_page", "marks"):
        original = getattr(Database, name)

        def counted(self: Database, *args: Any, _original: Any = original, _name: str = name, **kw: Any) -> Any:
            queries[_name] += 1
            return _original(self, *args, **kw)

        monkeypatch.setattr(Database, name, counted)
    streams = 20
    settings = Settings(records=str(tmp_path / "episodes.db"))
    with serve(create_app([Counter], settings)) as base, httpx.Client(base_url=base, timeout=10) as client:
        sids = [f"quiet-{n}" for n in range(streams)]
        for sid in sids:
            create(client, sid)
        queries.clear()
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            async with anyio.create_task_group() as group:
                got_call = anyio.Event()

                async def follow(sid: str) -> None:
                    async with http.stream("GET", f"/episodes/{sid}/events") as response:
                        async for line in response.aiter_lines():
                            if line == "event: call":
                                got_call.set()
                                return

                for sid in sids:
                    group.start_soon(follow, sid)
                quiet = 6 * POLL
                await anyio.sleep(quiet)  # the subject: what the streams cost while nothing happens
                looks = queries["marks"]
                # Each stream read its episode once when it opened (state and calls), at most once more if it
                # opened between two looks; before, every stream read both every POLL (~6 times here).
                assert queries["state"] <= 2 * streams and queries["call_page"] <= 2 * streams, queries
                assert 2 <= looks <= quiet / (POLL / 2) + 1, queries
                body = {"name": "increment", "input": {"by": 1}}
                response = await http.post("/counter/call", headers={"X-Session-ID": sids[7]}, json=body)
                assert response.status_code == 200
                with anyio.fail_after(10):  # reaches its stream
                    await got_call.wait()
                group.cancel_scope.cancel()
