"""`shell` episodes through toolsets, with the official `openreward` client: `openreward_toolset.py URL HOST_FILE
TOOLSET...`. For each toolset: the session's tools with their input schemas, the same toolset's tools as the
`openreward` package itself declares them, and the answers of the steps below (its file and shell tools at work in
the sandbox, the environment's own `submit` grading what they did, a host file the sandbox must not show). Then
the refusals of `/create`: an unknown toolset, and a toolset on an environment without a sandbox.

Prints one line `ORS-CLIENT-RESULT <json>`. Runs in the openreward venv.
"""

from __future__ import annotations

import json
import os
import sys
import types

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

from openreward import OpenReward  # noqa: E402
from openreward.api.environments import client as client_module  # noqa: E402
from openreward.environments.session import _toolset_specs  # noqa: E402
from openreward.toolsets import BUILTIN_TOOLSETS  # noqa: E402

UNKNOWN = "no-such-toolset"
# openreward 0.1.167's client refuses, before asking, every name outside its own list, which leaves out `cli`
# (its server serves it) and any unknown name: let both reach the server, which is what is under test.
client_module._VALID_BUILTIN_TOOLSETS.update({"cli", UNKNOWN})


def steps(toolset: str, host_file: str) -> list[tuple[str, str, dict]]:
    """(label, tool, arguments) in order; each toolset's shell step writes hello.txt, which `submit` grades."""
    shell = "printf hi > hello.txt; id -u; pwd"
    if toolset == "claude-code":
        return [
            ("write", "write", {"file_path": "notes/draft.txt", "content": "hello\nworld\n"}),
            ("edit", "edit", {"file_path": "/work/notes/draft.txt", "old_string": "world", "new_string": "there"}),
            ("read", "read", {"file_path": "notes/draft.txt"}),
            ("glob", "glob", {"pattern": "*.txt"}),
            ("glob_path", "glob", {"pattern": "**/d*.txt"}),
            ("grep", "grep", {"pattern": "there", "path": "notes"}),
            ("todo", "todo_write", {"todos": [{"content": "say hi", "status": "pending"}]}),
            ("host_file", "read", {"file_path": host_file}),
            ("bad_input", "read", {"path": "x"}),
            ("bash", "bash", {"command": shell, "timeout": 10}),
            ("slow", "bash", {"command": "sleep 30", "timeout": 1}),
        ]
    if toolset == "codex":
        return [("bash", "bash", {"command": shell, "timeout": 10})]
    if toolset == "cli":
        return [
            ("write", "write", {"file_path": "src/a.py", "content": "x = 1\ny = 1\n"}),
            ("edit", "edit", {"file_path": "src/a.py", "old_string": "1", "new_string": "2", "replace_all": True}),
            (
                "multi_edit",
                "multi_edit",
                {
                    "file_path": "src/a.py",
                    "edits": [{"old_string": "x = 2", "new_string": "x = 3"}, {"old_string": "y", "new_string": "why"}],
                },
            ),
            (
                "multi_edit_missing",
                "multi_edit",
                {
                    "file_path": "src/a.py",
                    "edits": [
                        {"old_string": "x = 3", "new_string": "x = 4"},
                        {"old_string": "absent", "new_string": ""},
                    ],
                },
            ),
            ("read", "read", {"file_path": "src/a.py"}),
            ("glob", "glob", {"pattern": "src/*.py"}),
            ("grep", "grep", {"pattern": "why", "include": "*.py"}),
            ("ls", "ls", {"path": "src", "ignore": ["*.pyc"]}),
            ("todo", "todo_write", {"todos": [{"content": "ship", "status": "in_progress", "priority": "high"}]}),
            ("host_file", "read", {"file_path": host_file}),
            ("bash", "bash", {"command": shell}),
        ]
    if toolset == "gemini-cli":
        return [
            ("write", "write_file", {"file_path": "docs/guide.md", "content": "# Guide\nold line\nend\n"}),
            ("replace", "replace", {"file_path": "docs/guide.md", "old_string": "old", "new_string": "new"}),
            ("read", "read_file", {"file_path": "docs/guide.md", "start_line": 2, "end_line": 3}),
            ("glob", "glob", {"pattern": "**/*.md"}),
            ("grep", "grep_search", {"pattern": "ne[w]", "include_pattern": "*.md", "exclude_pattern": "^never"}),
            ("list", "list_directory", {"dir_path": ".", "ignore": ["docs"]}),
            ("todos", "write_todos", {"todos": [{"description": "write the guide", "status": "completed"}]}),
            ("host_file", "read_file", {"file_path": host_file}),
            ("shell_in_dir", "run_shell_command", {"command": "pwd", "dir_path": "docs"}),
            ("shell", "run_shell_command", {"command": shell}),
        ]
    if toolset == "hermes":
        patch = (
            "*** Begin Patch\n*** Update File: plan.txt\n@@\n step one\n-step two\n+step 2\n"
            "*** Add File: extra/added.txt\n+added\n*** End Patch"
        )
        return [
            ("write", "write_file", {"path": "plan.txt", "content": "step one\nstep two\nstep three\n"}),
            ("replace", "patch", {"path": "plan.txt", "old_string": "three", "new_string": "3"}),
            ("patch", "patch", {"mode": "patch", "patch": patch}),
            ("read", "read_file", {"path": "plan.txt", "offset": 2, "limit": 1}),
            ("search", "search_files", {"pattern": "step [0-9]", "file_glob": "*.txt"}),
            ("find", "search_files", {"pattern": "*.txt", "target": "files"}),
            ("missing", "read_file", {"path": "plam.txt"}),
            ("host_file", "read_file", {"path": host_file}),
            ("terminal", "terminal", {"command": shell}),
        ]
    if toolset == "openclaw":
        patch = (
            "*** Begin Patch\n*** Update File: app/main.txt\n@@ def main()\n-    return 1\n+    return 0\n"
            "*** Delete File: app/old.txt\n*** End Patch"
        )
        return [
            ("write", "write", {"path": "app/main.txt", "content": "def main\n    return 1\n"}),
            ("write_old", "write", {"path": "app/old.txt", "content": "gone soon\n"}),
            ("edit", "edit", {"path": "app/main.txt", "edits": [{"oldText": "def main", "newText": "def main()"}]}),
            ("apply_patch", "apply_patch", {"input": patch}),
            (
                "bad_patch",
                "apply_patch",
                {"input": "*** Begin Patch\n*** Update File: app/main.txt\n-nope\n*** End Patch"},
            ),
            ("read", "read", {"path": "app/main.txt"}),
            ("listing", "exec", {"command": "ls app"}),
            ("process", "process", {"action": "poll", "sessionId": "s1"}),
            ("host_file", "read", {"path": host_file}),
            ("exec", "exec", {"command": shell, "timeout": 10}),
        ]
    raise SystemExit(f"no steps for {toolset}")


def _call(session, tool, arguments):
    try:
        out = session.call_tool(tool, arguments)
    except Exception as exc:
        return {"error": {"type": type(exc).__name__, "reason": getattr(exc, "reason", None), "message": str(exc)}}
    return {"reward": out.reward, "finished": out.finished, "text": "".join(b.text for b in out.blocks)}


def reference_schemas(toolset: str) -> dict:
    """The toolset's tools as the `openreward` package declares them, introspected as its own server does."""
    declared = BUILTIN_TOOLSETS[toolset](types.SimpleNamespace(sandbox=object()))
    return {spec.name: spec.input_schema for spec in _toolset_specs(declared)}


def main() -> None:
    base_url, host_file, *toolsets = sys.argv[1:]
    seen: dict = {}
    with OpenReward(api_key="local") as client:
        env = client.environments.get(name="shell", base_url=base_url)
        task = env.list_tasks("train")[0]  # hello_file
        for toolset in toolsets:
            with env.session(task=task, toolset=toolset) as session:
                listed = {t.name: t.input_schema for t in session.list_tools()}
                done = {"schemas": listed, "reference": reference_schemas(toolset)}
                for label, tool, arguments in steps(toolset, host_file):
                    done[label] = _call(session, tool, arguments)
                done["submit"] = _call(session, "submit", {})
            seen[toolset] = done
        refusals = {}
        for name, env_name in ((UNKNOWN, "shell"), (toolsets[0], "math")):
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
