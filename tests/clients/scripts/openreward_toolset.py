"""A `shell` episode through a toolset, with the official `openreward` client: `openreward_toolset.py URL TOOLSET
HOST_FILE`: the session's tools, the toolset's file and shell tools at work in the sandbox, the environment's own
`submit` grading what they did, a host file the sandbox must not show, and the refusals of `/create`.

Prints one line `ORS-CLIENT-RESULT <json>`. Runs in the openreward venv.
"""

from __future__ import annotations

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
    return {"reward": out.reward, "finished": out.finished, "text": "".join(b.text for b in out.blocks)}


def main() -> None:
    base_url, toolset, host_file = sys.argv[1:4]
    seen: dict = {}
    with OpenReward(api_key="local") as client:
        env = client.environments.get(name="shell", base_url=base_url)
        task = env.list_tasks("train")[0]  # hello_file
        with env.session(task=task, toolset=toolset) as session:
            seen["tools"] = sorted(t.name for t in session.list_tools())
            if toolset == "claude-code":
                seen["write"] = _call(session, "write", {"file_path": "notes/draft.txt", "content": "hello\nworld\n"})
                seen["edit"] = _call(
                    session,
                    "edit",
                    {"file_path": "/work/notes/draft.txt", "old_string": "world", "new_string": "there"},
                )
                seen["read"] = _call(session, "read", {"file_path": "notes/draft.txt"})
                seen["glob"] = _call(session, "glob", {"pattern": "*.txt"})
                seen["grep"] = _call(session, "grep", {"pattern": "there", "path": "notes"})
                seen["todo"] = _call(session, "todo_write", {"todos": [{"content": "say hi", "status": "pending"}]})
                seen["host_file"] = _call(session, "read", {"file_path": host_file})
                seen["bad_input"] = _call(session, "read", {"path": "x"})
            seen["bash"] = _call(session, "bash", {"command": "printf hi > hello.txt; id -u; pwd", "timeout": 10})
            seen["slow"] = _call(session, "bash", {"command": "sleep 30", "timeout": 1})
            seen["submit"] = _call(session, "submit", {})
        refusals = {}
        for name, env_name in (("unknown", "shell"), (toolset, "math")):
            try:
                other = client.environments.get(name=env_name, variant=env_name, base_url=base_url)
                with other.session(task=other.list_tasks("train")[0], toolset=name):
                    refusals[f"{name}@{env_name}"] = "created"
            except Exception as exc:
                refusals[f"{name}@{env_name}"] = f"{type(exc).__name__}: {exc}"
        seen["refusals"] = refusals
    print("ORS-CLIENT-RESULT " + json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
