"""Helpers shared by the client scripts (standard library only: they run in the clients' venvs)."""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import urllib.error
import urllib.request
from typing import Any

RESULT_PREFIX = "ORS-CLIENT-RESULT "


def report(result: dict) -> None:
    """Print the one line the test reads; everything else on stdout is only shown on failure."""
    sys.stdout.write(RESULT_PREFIX + json.dumps(result, default=repr) + "\n")
    sys.stdout.flush()


def step_record(result: Any) -> dict:
    """An OpenEnv client's `StepResult` as plain JSON: observation (a model dumped), reward, done, metadata."""
    observation = result.observation
    if hasattr(observation, "model_dump"):
        observation = observation.model_dump(mode="json")
    return {"observation": observation, "reward": result.reward, "done": result.done, "metadata": result.metadata}


LAKE_MOVES = {"LEFT": (0, -1), "DOWN": (1, 0), "RIGHT": (0, 1), "UP": (-1, 0)}


def lake_route(rows: list[str]) -> list[str]:
    """The shortest safe route on a FrozenLake grid's rows, from `x` (or `S`) to `G` around the holes (breadth
    first): the scripted agent's moves."""
    start = next((r, c) for r, row in enumerate(rows) for c, cell in enumerate(row) if cell in "xS")
    routes: dict[tuple[int, int], list[str]] = {start: []}
    queue = collections.deque([start])
    while queue:
        r, c = queue.popleft()
        if rows[r][c] == "G":
            return routes[(r, c)]
        for name, (dr, dc) in LAKE_MOVES.items():
            nr, nc = r + dr, c + dc
            if 0 <= nr < len(rows) and 0 <= nc < len(rows[0]) and rows[nr][nc] != "H" and (nr, nc) not in routes:
                routes[(nr, nc)] = [*routes[(r, c)], name]
                queue.append((nr, nc))
    raise RuntimeError(f"no route on {rows}")


API_KEY = os.environ.get("ORS_TEST_API_KEY")
"""The server's API key, when the test started it with one: the clients and these bare requests send it."""


def _with_key(headers: dict[str, str] | None = None) -> dict[str, str]:
    return {**(headers or {}), **({"X-API-Key": API_KEY} if API_KEY else {})}


def post(base_url: str, path: str, headers: dict[str, str] | None = None, body: bytes = b"") -> tuple[int, str]:
    """A bare POST outside any client, to look at the server after the client is done."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"{base_url}{path}", data=body, method="POST", headers=_with_key(headers))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def ping_status(base_url: str, sid: str) -> int:
    """The status `POST /ping` answers for `sid` (404 or 410 once the session is gone)."""
    status, _ = post(base_url, "/ping", {"X-Session-ID": sid, "Content-Type": "application/octet-stream"})
    return status


def live_sessions(base_url: str) -> int | None:
    """Live sessions per the server's `/metrics` (`ors_live_sessions`), or None if it has no such metric."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(f"{base_url}/metrics", headers=_with_key()), timeout=10) as response:
            text = response.read().decode(errors="replace")
    except (OSError, urllib.error.URLError):
        return None
    if not re.search(r"^# TYPE ors_live_sessions gauge$", text, re.MULTILINE):
        return None
    # One sample per environment with live sessions; none at all when there are none.
    counts = [line.rsplit(" ", 1)[-1] for line in text.splitlines() if re.match(r"ors_live_sessions[{ ]", line)]
    return int(sum(float(count) for count in counts))
