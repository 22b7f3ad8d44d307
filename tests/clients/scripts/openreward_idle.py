"""An `openreward` session that stays idle for a while, then answers: `openreward_idle.py URL ENV SECONDS`.

The client pings every 10 s from its own thread while a session is open, so against a server whose
idle timeout is longer than that the session survives; against a shorter one it is reaped, and the
client reports it as terminated.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

from _common import ping_status, report  # noqa: E402
from openreward import OpenReward  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base_url")
    parser.add_argument("env")
    parser.add_argument("seconds", type=float)
    parser.add_argument("--answer-key", default="answer")
    args = parser.parse_args()
    result: dict = {}
    with OpenReward(api_key="local") as client:
        env = client.environments.get(name=args.env, variant=args.env, base_url=args.base_url)
        task = env.get_task("train", 0)
        try:
            with env.session(task=task) as session:
                result["sid"] = session.sid
                time.sleep(args.seconds)
                result["ping_after_idle"] = ping_status(args.base_url, session.sid)
                out = session.call_tool("submit", {"answer": str(task.task_spec[args.answer_key])})
                result["call"] = {"reward": out.reward, "finished": out.finished}
        except Exception as exc:  # the client's typed errors are what we observe
            result["error"] = {"type": type(exc).__name__, "status": getattr(exc, "status", None), "message": str(exc)}
    report(result)


if __name__ == "__main__":
    main()
