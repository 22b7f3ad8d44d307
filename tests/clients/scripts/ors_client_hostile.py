"""`ors-client` against a hostile server (`tests/clients/hostile.py`), run in a venv holding only `ors-client`:
`ors_client_hostile.py CHECK URL [--max-event-bytes N]`.

Each check reports, per request, what the client raised (or returned), how long it took and how much its peak
resident memory grew, as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from collections.abc import Awaitable
from typing import Any

from _common import report
from ors_client import AsyncClient, OrsError

KEY = "the-api-key"
SECRET = "the-secret-value"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def outcome(request: Awaitable[Any]) -> dict:
    """What `request` came to: its value or the client's error, with its time and the peak memory it added."""
    before, started = peak_rss_mb(), time.monotonic()
    try:
        result: dict = {"value": await request}
    except OrsError as exc:
        result = {"error": type(exc).__name__, "detail": exc.detail, "status": exc.status}
    result["seconds"] = round(time.monotonic() - started, 3)
    result["peak_rss_growth_mb"] = round(peak_rss_mb() - before, 1)
    return result


async def open_session(client: AsyncClient) -> str:
    async with client.session("quiz", task={"q": 1}, secrets={"TOKEN": SECRET}) as s:
        return s.id or ""


async def call_big(client: AsyncClient) -> int:
    async with client.session("quiz", task={"q": 1}) as s:
        return len((await s.call("big")).text)


async def main(args: argparse.Namespace) -> dict:
    options = (
        {"retries": 0} if args.max_event_bytes is None else {"retries": 0, "max_event_bytes": args.max_event_bytes}
    )
    async with AsyncClient(args.url, KEY, **options) as client:
        if args.check == "redirect":
            return {"create": await outcome(open_session(client))}
        if args.check == "big_body":
            return {"declared": await outcome(client.environments()), "chunked": await outcome(client.tasks("quiz"))}
        if args.check == "long_line":
            return {"call": await outcome(call_big(client))}
    raise SystemExit(f"unknown check {args.check}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["redirect", "big_body", "long_line"])
    parser.add_argument("url")
    parser.add_argument("--max-event-bytes", type=int)
    report(asyncio.run(main(parser.parse_args())))
