"""What an ORS client does with each shape a tool call can answer, and whether its session is usable after it:
`tool_outcomes.py URL CLIENT` (CLIENT: `openreward` or `ors-sdk`) against a server serving `frozen_lake` and
`tests.ors_envs:MathLike`.

    input error    an `end` event with `{"ok": false, "reason": "input_validation"}` (a FrozenLake action outside
                   the schema's enum)
    error text     an `end` event with `{"ok": true}` whose output is text (MathLike's `echo`)
    tool crash     an `error` event (MathLike's `boom` raises)
    progress       `progress` events, then an `end` (MathLike's `count` reports 5 steps; fast, and streamed)

After each, the script makes one valid call in the same session and records what the client did with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from typing import Any

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

from _common import API_KEY, report  # noqa: E402


def _outcome(call: Callable[[], Any]) -> dict:
    try:
        out = call()
    except Exception as exc:  # the client's typed errors are what we observe
        return {"raised": type(exc).__name__, "reason": getattr(exc, "reason", None), "message": str(exc)}
    return {"blocks": [dataclasses.asdict(block) for block in out.blocks], "finished": out.finished}


def _shape(env: Any, task: Any, name: str, arguments: dict, then: tuple[str, dict]) -> dict:
    with env.session(task=task) as session:
        first = _outcome(lambda: session.call_tool(name, arguments))
        after = _outcome(lambda: session.call_tool(*then))
    return {"call": first, "then": after}


def run(lake: Any, math: Any) -> dict:
    lake_task = lake.get_task("examples", 0)  # seed 42
    math_task = math.get_task("train", 0)
    down = ("lake_move", {"action": "down"})  # the README's lower-case spelling
    echo = ("echo", {"text": "still here"})
    return {
        "input_error": _shape(lake, lake_task, "lake_move", {"action": "JUMP"}, down),
        "wrong_type": _shape(lake, lake_task, "lake_move", {"action": 3}, down),
        "error_text": _shape(math, math_task, "echo", {"text": "Error: that did not work"}, echo),
        "tool_crash": _shape(math, math_task, "boom", {}, echo),
        # `progress` events before the result: in the one response of a fast call, streamed from a slow one.
        "progress_fast": _shape(math, math_task, "count", {"steps": 5}, echo),
        "progress_streamed": _shape(math, math_task, "count", {"steps": 5, "pause": 0.25}, echo),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base_url")
    parser.add_argument("client", choices=["openreward", "ors-sdk"])
    args = parser.parse_args()
    if args.client == "openreward":
        from openreward import OpenReward

        with OpenReward(api_key=API_KEY or "local") as client:
            get = client.environments.get
            lake = get(name="frozen_lake", variant="frozen_lake", base_url=args.base_url)
            math = get(name="mathlike", variant="mathlike", base_url=args.base_url)
            result = run(lake, math)
    else:
        from ors.client import ORS

        with ORS(base_url=args.base_url, api_key=API_KEY) as client:
            result = run(client.environment("frozen_lake"), client.environment("mathlike"))
    report(result)


if __name__ == "__main__":
    main()
