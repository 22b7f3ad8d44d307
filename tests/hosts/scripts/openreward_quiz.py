"""Play `quiz` (tests/hosts/quiz.py) with the official `openreward` client: `openreward_quiz.py URL`.

Prints one line `ORS-CLIENT-RESULT <json>` of everything the client saw, for the test to compare between
`openreward`'s own server and ours. Runs in the openreward venv.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

from openreward import OpenReward  # noqa: E402


def _call(session, tool, arguments):
    try:
        out = session.call_tool(tool, arguments)
    except Exception as exc:
        return {"error": {"type": type(exc).__name__, "reason": getattr(exc, "reason", None), "message": str(exc)}}
    blocks = [dataclasses.asdict(block) for block in out.blocks]
    return {"reward": out.reward, "finished": out.finished, "blocks": blocks, "metadata": out.metadata}


def main() -> None:
    base_url = sys.argv[1]
    seen: dict = {}
    with OpenReward(api_key="local") as client:
        env = client.environments.get(name="quiz", base_url=base_url)
        seen["splits"] = env.list_splits()
        seen["tools"] = [dataclasses.asdict(t) for t in env.list_tools()]
        seen["num_tasks"] = {split: env.num_tasks(split) for split in ("train", "test")}
        tasks = env.list_tasks("train")
        seen["tasks"] = [[t.environment_name, t.task_spec] for t in tasks]
        seen["task_test_1"] = env.get_task("test", 1).task_spec
        with env.session(task=tasks[0], secrets={"API_TOKEN": ("s3cret-token", ["example.com"])}) as session:
            seen["prompt"] = [dataclasses.asdict(b) for b in session.get_prompt()]
            seen["session_tools"] = [t.name for t in session.list_tools()]
            seen["calls"] = [
                _call(session, "hint", {}),
                _call(session, "check_secret", {}),
                _call(session, "note", {"text": "a"}),
                _call(session, "note", {"text": "b", "times": 2}),
                _call(session, "no_such_tool", {}),
                _call(session, "note", {"times": "many"}),
                _call(session, "answer", {"answer": "4"}),
                _call(session, "answer", {"answer": "4"}),
            ]
        with env.session(split="test", index=1) as session:
            seen["by_index"] = {
                "prompt": [dataclasses.asdict(b) for b in session.get_prompt()],
                "secret": _call(session, "check_secret", {}),
                "wrong": _call(session, "answer", {"answer": "8"}),
            }
    sys.stdout.write("ORS-CLIENT-RESULT " + json.dumps(seen, default=repr) + "\n")


if __name__ == "__main__":
    main()
