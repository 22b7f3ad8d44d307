"""Reading what a server recorded, with bounded waits (records reach the database within about a second)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

WAIT = 10.0


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
