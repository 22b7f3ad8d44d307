"""Two `openreward` sessions left idle until the server reaps both: `openreward_reaped.py URL ENV SECONDS`.

Run against `serve --session-timeout 2 --tombstones 1`: both are reaped in one pass, the first one first, so the
server still remembers only the second (410, "expired") and has forgotten the first (404, like an id that never
existed). Records what the client does with each: its exception, and whether a second call raises the same.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

from _common import ping_status, report  # noqa: E402
from openreward import OpenReward  # noqa: E402


def _error(call) -> dict:
    try:
        call()
    except Exception as exc:  # the client's typed errors are what we observe
        return {"type": type(exc).__name__, "status": getattr(exc, "status", None), "message": str(exc)}
    return {"type": None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base_url")
    parser.add_argument("env")
    parser.add_argument("seconds", type=float)
    args = parser.parse_args()
    result: dict = {}
    with OpenReward(api_key="local") as client:
        env = client.environments.get(name=args.env, variant=args.env, base_url=args.base_url)
        task = env.get_task("train", 0)
        with env.session(task=task) as forgotten, env.session(task=task) as remembered:
            time.sleep(args.seconds)
            for name, session in (("forgotten", forgotten), ("remembered", remembered)):
                move = lambda s=session: s.call_tool("submit", {"answer": str(task.task_spec["answer"])})  # noqa: E731
                result[name] = {
                    "sid": session.sid,
                    "ping": ping_status(args.base_url, session.sid),
                    "call": _error(move),
                    "call_again": _error(move),
                }
    report(result)


if __name__ == "__main__":
    main()
