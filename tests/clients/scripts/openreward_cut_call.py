"""The official `openreward` client calls a tool whose worker dies mid-call: `openreward_cut_call.py URL`.

The server is a deployment serving `tests.scale.scale_envs:Gated`, whose `wait` tool blocks until the test kills
its worker. Reports what `call_tool` raised (or returned).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

from _common import API_KEY, report  # noqa: E402
from openreward import OpenReward  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base_url")
    args = parser.parse_args()
    with OpenReward(api_key=API_KEY or "local") as client:
        env = client.environments.get(name="gated", variant=None, base_url=args.base_url)
        task = env.list_tasks("train")[0]
        result: dict = {}
        try:
            with env.session(task=task) as session:
                started = time.monotonic()
                try:
                    out = session.call_tool("wait", {})
                except Exception as exc:  # the client's typed error is what we observe
                    result["error"] = {"type": type(exc).__name__, "message": str(exc)}
                else:
                    result["returned"] = {"reward": out.reward, "finished": out.finished}
                result["seconds"] = time.monotonic() - started
        except Exception as exc:  # ending a session that is gone may fail too: recorded, not fatal
            result["on_exit"] = type(exc).__name__
    report(result)


if __name__ == "__main__":
    main()
